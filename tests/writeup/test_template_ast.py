"""The schema test's reader of templates (``template_ast.reads``) on small templates written here,
where what each reads is known."""
from . import template_ast


def test_an_imported_macro_that_calls_its_file_s_other_macro_is_followed(tmp_path, monkeypatch):
    """A section imports ``outer`` from a shared file; ``outer`` calls that file's ``inner``, which
    reads a key the section never names: the reader follows the call and finds the key."""
    sections = tmp_path / "sections"
    sections.mkdir()
    (sections / "_shared.md.j2").write_text(
        "{% macro inner(x) %}{{ x.deep }}{% endmacro %}\n{% macro outer(x) %}({{ inner(x) }}){% endmacro %}\n")
    (sections / "X1.md.j2").write_text('{% from "sections/_shared.md.j2" import outer %}\n{{ outer(d.a) }} {{ d.b }}\n')
    monkeypatch.setattr(template_ast, "TEMPLATES", tmp_path)
    monkeypatch.setattr(template_ast, "SECTIONS_DIR", sections)
    assert template_ast.reads("X1").paths >= {("a", "deep"), ("b",)}
