"""Each section's summary has a schema (``SUMMARY_SCHEMAS[ID]`` in the report module the registry names
for it, collected by ``cs336_systems.report.summary_schemas.schemas``): every summary in results/ fits
its section's, every key a template reads is declared in its section's, and every key a schema declares
is one its template reads."""
from pathlib import Path
import json

import pytest

from cs336_systems import deliverables
from cs336_systems.report.summary_schemas import SummaryError, check, schemas
from cs336_systems.report.writeup import SECTIONS

from .template_ast import ANY, TEMPLATES, reads

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _archived(run: Path) -> bool:
    """An archive keeps the summaries it was last rendered from (pipeline.run_folder): not today's schemas."""
    identity = run / "run.json"
    return identity.is_file() and bool(json.loads(identity.read_text()).get("archive"))


SUMMARIES = sorted(p for p in RESULTS.glob("*/*/summary.json") if not _archived(p.parents[1]))
SCHEMAS = schemas()


def _where(ident: str) -> str:
    return f"SUMMARY_SCHEMAS[{ident!r}] in {deliverables.get(ident).report}"


def test_every_section_has_a_schema():
    missing = [_where(ident) for ident in SECTIONS if ident not in SCHEMAS]
    assert list(SCHEMAS) == list(SECTIONS), f"a section without a schema: add {', '.join(missing)}"


def test_results_hold_summaries():
    assert {p.parent.name for p in SUMMARIES} >= set(SECTIONS), "results/ lost a committed run's summaries"


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: f"{p.parents[1].name}/{p.parent.name}")
def test_every_summary_fits_its_schema(path):
    check(path.parent.name, json.loads(path.read_text()), path)


def _step(schema: dict, key: str) -> dict | None:
    """The schema of ``key`` (``ANY``: an item or any value) inside ``schema``, None where it declares none."""
    if key == ANY:
        inner = schema.get("items", schema.get("additionalProperties"))
        return inner if isinstance(inner, dict) else None
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    inner = schema.get("additionalProperties")
    return inner if isinstance(inner, dict) else None


def _declared(schema: dict, prefix: tuple = ()):
    """Every path a schema declares, ``ANY`` for an item or any value."""
    for key, sub in schema.get("properties", {}).items():
        yield prefix + (key,)
        yield from _declared(sub, prefix + (key,))
    for inner in (schema.get("items"), schema.get("additionalProperties")):
        if isinstance(inner, dict) and inner:
            yield prefix + (ANY,)
            yield from _declared(inner, prefix + (ANY,))


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
    assert not undeclared, f"{ident}.md.j2 reads keys {_where(ident)} does not declare: {undeclared}"


def _matches(declared: tuple, read: tuple) -> bool:
    """A declared path is read where the template reads it, or reads a key of the mapping it is the values of."""
    return len(declared) == len(read) and all(a == b or a == ANY for a, b in zip(declared, read))


@pytest.mark.parametrize("ident", list(SECTIONS))
def test_the_schema_declares_nothing_the_template_does_not_read(ident):
    read = reads(ident).paths
    unread = [".".join(("d",) + p) for p in _declared(SCHEMAS[ident])
              if p[0] != "provenance" and p[-1] != ANY and not any(_matches(p, r) for r in read)]
    assert not unread, f"{_where(ident)} declares keys {ident}.md.j2 does not read: {unread}"


def test_a_missing_key_is_named_in_one_line(tmp_path):
    summary = json.loads((RESULTS / "h200" / "A3" / "summary.json").read_text())
    del summary["checks"]["stall"]
    with pytest.raises(SummaryError) as e:
        check("A3", summary, "results/x/A3/summary.json")
    assert str(e.value) == ("writeup: section A3: results/x/A3/summary.json lacks d.checks.stall "
                            "(schema: SUMMARY_SCHEMAS['A3'] in cs336_systems.report.a3)")


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
