"""Each section's summary has a schema (generated from ``CONTRACTS[ID]`` in the report module the
registry names for it, collected by ``cs336_systems.report.contract.schemas``):
every summary in results/ fits its section's, every key a template reads is declared in its section's,
and every key a schema declares is one its template reads (a contract's class: somewhere it is used)."""
from pathlib import Path
import json

import pytest

from cs336_systems.report.contract import SummaryError, check, declared_in, schemas
from cs336_systems.report.writeup import SECTIONS

from .template_ast import ANY, TEMPLATES, reads

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _archived(run: Path) -> bool:
    """An archive keeps the summaries it was last rendered from (pipeline.run_folder): not today's schemas."""
    identity = run / "run.json"
    return identity.is_file() and bool(json.loads(identity.read_text()).get("archive"))


SUMMARIES = sorted(p for p in RESULTS.glob("*/*/summary.json") if not _archived(p.parents[1]))
SCHEMAS = schemas()


def test_every_section_has_a_schema():
    missing = [ident for ident in SECTIONS if ident not in SCHEMAS]
    assert list(SCHEMAS) == list(SECTIONS), f"sections without a contract or a schema: {', '.join(missing)}"


def test_results_hold_summaries():
    assert {p.parent.name for p in SUMMARIES} >= set(SECTIONS), "results/ lost a committed run's summaries"


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: f"{p.parents[1].name}/{p.parent.name}")
def test_every_summary_fits_its_schema(path):
    check(path.parent.name, json.loads(path.read_text()), path)


def _step(schema: dict, key: str) -> dict | None:
    """The schema of ``key`` (``ANY``: an item or any value) inside ``schema``, None where it declares none."""
    if schema == {}:            # Any: whatever it holds is declared as Any
        return schema
    if key == ANY:
        inner = schema.get("items", schema.get("additionalProperties"))
        return inner if isinstance(inner, dict) else None
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    inner = schema.get("additionalProperties")
    return inner if isinstance(inner, dict) else None


def _declared(schema: dict, path: tuple = ()):
    """Every key a schema declares, with what declares it: the contract's class (the object's title),
    else the path to the object, ``ANY`` for an item or any value."""
    for key, sub in schema.get("properties", {}).items():
        yield schema.get("title", path), key
        yield from _declared(sub, path + (key,))
    for inner in (schema.get("items"), schema.get("additionalProperties")):
        if isinstance(inner, dict) and inner:
            yield from _declared(inner, path + (ANY,))


def _read(schema: dict, paths):
    """The declared keys the template's ``paths`` read, named as ``_declared`` names them."""
    for read in paths:
        sub, at = schema, ()
        for key in read:
            declared = key in sub.get("properties", {})
            if declared:
                yield sub.get("title", at), key
            sub = _step(sub, key)
            if sub is None:
                break
            at += (key if declared else ANY,)


@pytest.mark.parametrize("ident", list(SECTIONS))
def test_the_schema_declares_what_the_template_reads(ident):
    undeclared = []
    for path in sorted(reads(ident).paths):
        schema = SCHEMAS[ident]
        for key in path:
            schema = _step(schema, key)
            if schema is None:
                undeclared.append(".".join(("d",) + path))
                break
    assert not undeclared, f"{ident}.md.j2 reads keys the {declared_in(ident)} does not declare: {undeclared}"


@pytest.mark.parametrize("ident", list(SECTIONS))
def test_the_schema_declares_nothing_the_template_does_not_read(ident):
    read = set(_read(SCHEMAS[ident], reads(ident).paths))
    unread = [f"{owner if isinstance(owner, str) else '.'.join(('d',) + owner)}: {key}"
              for owner, key in dict.fromkeys(_declared(SCHEMAS[ident]))
              if owner[:1] != ("provenance",) and (owner, key) not in read]
    assert not unread, (f"the {declared_in(ident)} declares keys {ident}.md.j2 does not read "
                        f"(a contract marks such a field Unread): {unread}")


def test_a_missing_key_is_named_in_one_line(tmp_path):
    summary = json.loads((RESULTS / "h200" / "A3" / "summary.json").read_text())
    del summary["checks"]["stall"]
    with pytest.raises(SummaryError) as e:
        check("A3", summary, "results/x/A3/summary.json")
    assert str(e.value) == ("writeup: section A3: results/x/A3/summary.json lacks d.checks.stall "
                            "(contract: A3Summary in cs336_systems.report.a3)")


def test_a_key_of_the_wrong_type_is_named_in_one_line():
    summary = json.loads((RESULTS / "h200" / "A3" / "summary.json").read_text())
    summary["course_terms"] = "1000"
    with pytest.raises(SummaryError) as e:
        check("A3", summary, "results/x/A3/summary.json")
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("writeup: section A3: results/x/A3/summary.json d.course_terms is \"1000\", not ")


def test_the_writeup_refuses_a_summary_that_does_not_fit(tmp_path):
    from cs336_systems.report import writeup
    folder = tmp_path / "results" / "r" / "A3"
    folder.mkdir(parents=True)
    summary = json.loads((RESULTS / "h200" / "A3" / "summary.json").read_text())
    del summary["largest_terms"]
    (folder / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit, match=r"^writeup: section A3: .*summary.json lacks d.largest_terms "):
        writeup.main(["--run", "r", "--preset", "full", "--templates", str(TEMPLATES),
                      "--summaries", str(folder / "summary.json"), "--md", str(tmp_path / "w.md"),
                      "--html", str(tmp_path / "w.html")])
