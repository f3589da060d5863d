"""Reports decide, templates word: a section template holds sentences and placeholders.

Three rules, checked on writeup/templates/sections/*.md.j2 (``template_ast``):

- **No typed figures.** A run of characters holding a digit in a template's prose (outside its tags,
  comments and `code spans`) is a number the template typed, unless it is a name: a word that starts
  with a letter (IDs A1 and C12, dtypes fp32 and bf16, H100, L2, fc2, ZeRO-1) or the model size 2.7B.
  "0.005 %", "3×", "32 × 32 tiles", "2·B·N²" are figures: a number belongs in the summary, written
  by the report that knows where it comes from.
- **No comparisons or arithmetic in tags.** An ordering comparison (``<``, ``<=``, ``>``, ``>=``, also as
  ``selectattr``'s or ``is``'s ``gt``/``lt``/…), ``==``/``!=`` between two values (against a literal it
  picks wording: ``!= 1`` for a plural, ``== "fp32"``), arithmetic (``+ - * / // % **``, a unary minus;
  ``"%.1f" % x`` is formatting) and the filters that compute (``max``, ``min``, ``sum``, ``round``, ``abs``).
  A verdict or a derived number is a summary key computed in Python; the template words it.
- **Fewer branches.** Each ``{% if %}`` or ``{% elif %}`` is a choice of words the template makes from
  the data; where a report decides which case holds (an enum, a verdict), the template words each case
  once. The count only falls: it is the measure of how much deciding is left in the templates.

Templates written before these rules hold violations: ``ALLOWED`` counts them per template, and a
template must hold exactly its count, so a new violation fails and so does one removed without
lowering the count: the list only shrinks.
"""
import pytest

from .template_ast import SECTIONS_DIR, branches, figures, logic

# template: (typed figures, comparisons and arithmetic, {% if %} tags) it held when the rules came in.
ALLOWED = {
    # steps' FLOPs in the MFU definition ("2 per parameter", "3× that")
    "A1": (2, 0, 38),
    # "near 1" (a ratio that holds by construction), the softmax's 1/√d scale
    "A2": (2, 0, 49),
    # the formats' bit counts (bf16's 8 exponent and 7 mantissa bits, fp16's 10 (11))
    "A3": (6, 0, 7),
    # LayerNorm's toy widths, fp16's smallest normal and largest number
    "A4": (4, 0, 39),
    # a residual's 4 bytes
    "A5": (2, 0, 24),
    # the checkpointing closed form's constants
    "A6": (4, 0, 16),
    # the closed form 2·B·N²
    "B1": (1, 0, 28),
    "B2": (0, 0, 65),
    # tile sizes, the mask value, the head dimensions accepted
    "B3": (8, 0, 7),
    # 2N²d per product
    "B4": (1, 0, 11),
    # batch 1, "below 1"
    "B5": (2, 0, 64),
    # the C family, _ddp and C9: another change is splitting report/ddp.py and rewords them
    "C1": (5, 0, 11),
    "C2": (1, 0, 1),
    "C3": (1, 0, 4),
    "C4": (1, 0, 12),
    "C5": (0, 0, 1),
    "C6": (1, 0, 15),
    "C7": (0, 0, 3),
    "C8": (8, 0, 54),
    "C9": (21, 0, 1),
    "C10": (1, 0, 2),
    "C11": (15, 0, 10),
    "C12": (4, 0, 25),
    "_ddp": (0, 0, 20),
    # ln 10 000 (the vocabulary's size)
    "E1": (2, 0, 73),
    "_flash": (0, 0, 8),
    # the provenance line's date span (first day against last)
    "_run": (0, 0, 2),
    # every section's shape: question, answer, figure, how measured, then the details
    "_section": (0, 0, 1),
}

TEMPLATES = sorted(p.name for p in SECTIONS_DIR.glob("*.md.j2"))


def test_every_template_is_counted():
    assert sorted(f"{name}.md.j2" for name in ALLOWED) == TEMPLATES


def _listing(found) -> str:
    return "\n".join(f"  line {line}: {what}" for line, what in found)


# Each rule: its column in ALLOWED, what finds its cases, how a case is counted, what to do instead.
RULES = {
    "typed figures": (0, figures, "typed figures in its prose", "put the number in the summary"),
    "comparisons and arithmetic": (1, logic, "comparisons or arithmetic in its tags",
                                   "compute it in the report, put it in the summary"),
    "branches": (2, branches, "{% if %}/{% elif %} tags", "let the report decide which case holds"),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("name", TEMPLATES)
def test_no_new_cases_of_a_rule(name, rule):
    column, find, what, instead = RULES[rule]
    found = find(name)
    allowed = ALLOWED[name[:-len(".md.j2")]][column]
    assert len(found) <= allowed, f"{name} has {len(found)} {what}, {allowed} allowed ({instead}):\n{_listing(found)}"
    assert len(found) == allowed, (f"{name} has {len(found)} {what}, fewer than ALLOWED's {allowed}: "
                                   f"lower its count in tests/writeup/test_template_lint.py\n{_listing(found)}")


def test_the_rules_catch_what_they_name(tmp_path, monkeypatch):
    from . import template_ast
    (tmp_path / "sections").mkdir()
    (tmp_path / "sections" / "Z1.md.j2").write_text(
        "A1 and C12 in fp32 on an H100, `x[0] = 3`, 2.7B; it moved 0.005 % and 3× that.\n"
        "{% if d.a < d.b %}{{ 100 * d.c }}{% endif %}{{ 's' if d.n != 1 }}{{ d.xs | max }}{{ '%g' % d.y }}"
        "{{ d.xs | selectattr('v', 'gt', 0) | list }}{% if d.p == d.q %}{% elif d.r %}{% endif %}{{ 's' if d.m }}\n")
    monkeypatch.setattr(template_ast, "SECTIONS_DIR", tmp_path / "sections")
    assert [t for _, t in figures("Z1.md.j2")] == ["0.005", "3×"]
    assert sorted(w for _, w in logic("Z1.md.j2")) == [
        "arithmetic *", "arithmetic | max", "comparison <", "comparison == of two values", "comparison | selectattr('gt')"]
    assert len(branches("Z1.md.j2")) == 3         # two {% if %}, one {% elif %}; the inline plural is not one
