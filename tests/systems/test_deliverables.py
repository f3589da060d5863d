"""cs336_systems.deliverables: every ID one hop from its rules, module, report, folder and section."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cs336_systems import deliverables
from cs336_systems.distributed import variants
from cs336_systems.pipeline.sources import module_file
from cs336_systems.report import ddp as ddp_report
from cs336_systems.report.writeup import SECTIONS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rule_names() -> list[str]:
    snakemake = Path(sys.executable).with_name("snakemake")
    proc = subprocess.run([str(snakemake), "--list-rules", "--config", "preset=smoke"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # One rule a line, "name (docstring)"; a docstring's later lines are indented.
    return [line.split()[0] for line in proc.stdout.splitlines() if line and not line[0].isspace()]


def test_ids_are_numbered_in_order_part_by_part():
    """A1..A6, B1..B5, C1..C12 (the assignment's), then the issues' (E1): a letter per part, parts in
    alphabetical order, each part numbered from 1 without a gap; a config section names them so."""
    from cs336_systems.pipeline.config import SECTION

    assert all(SECTION.fullmatch(ident) and not SECTION.fullmatch(ident).group(2) for ident in deliverables.IDS)
    assert list(deliverables.IDS) == sorted(deliverables.IDS, key=lambda ident: (ident[0], int(ident[1:])))
    for part in {ident[0] for ident in deliverables.IDS}:
        numbered = [ident for ident in deliverables.IDS if ident[0] == part]
        assert numbered == [f"{part}{n}" for n in range(1, len(numbered) + 1)], part
    assert list(SECTIONS) == list(deliverables.IDS)           # the writeup reads titles and order here


def _runnable(module: str) -> bool:
    path = module_file(module)
    return path is not None and 'if __name__ == "__main__":' in path.read_text()


@pytest.mark.parametrize("d", deliverables.DELIVERABLES, ids=lambda d: d.id)
def test_one_hop_from_the_id(d, rule_names):
    rule_file = (REPO / "workflow" / "rules" / d.rules).read_text()
    assert (REPO / "writeup" / "templates" / d.section).is_file()
    assert _runnable(d.runs) and _runnable(d.report), "what the map prints as `python -m` must run"
    assert module_file(d.module) is not None
    assert set(deliverables.rules_of(d)) <= set(rule_names)
    for rule in deliverables.rules_of(d):        # each defined in the registry's rule file (loops by f-string)
        assert f"rule {rule}:" in rule_file or f'f"{{ident}}_{rule.split("_", 1)[1]}"' in rule_file, rule
    assert d.folder("h200") == f"results/h200/{d.id}"
    assert d.needs in (deliverables.CPU, deliverables.ONE_GPU, deliverables.RANKS)
    assert set(d.reads) <= set(deliverables.IDS) - {d.id}


def test_the_registry_names_every_rule(rule_names):
    named = {rule for d in deliverables.DELIVERABLES for rule in deliverables.rules_of(d)}
    assert named | {"all", "writeup"} == set(rule_names)


def test_the_printed_map_has_every_id_one_hop_each_way():
    proc = subprocess.run([sys.executable, "-m", "cs336_systems.deliverables"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("\n")
    heads = [line.split()[0] for line in blocks if line and not line[0].isspace()]
    assert heads == list(deliverables.IDS)
    for d in deliverables.DELIVERABLES:
        block = proc.stdout.split(f"\n{d.id} ", 1)[-1] if d.id != "A1" else proc.stdout
        assert f"python -m {d.runs}" in block and f"results/<run>/{d.id}/" in block and d.section in block


def test_data_parallel_reads_are_where_their_variants_live():
    for ident in ddp_report.SECTIONS:
        d = deliverables.get(ident)
        wanted = variants.names() if d.variants is None else [*d.variants, variants.BASELINE]
        by_name = {v.name: v for v in variants.VARIANTS}          # names as listed (families too)
        folders = {by_name[v].deliverable for v in wanted} - {ident}
        assert folders <= set(d.reads), (ident, folders)


def test_every_rule_is_named_by_its_deliverable(rule_names):
    unnamed = [r for r in rule_names if r not in ("all", "writeup") and r.split("_")[0] not in deliverables.IDS]
    assert not unnamed, unnamed


def test_rule_files_hold_only_their_ids():
    # A rule file named for IDs (a3_a4_precision.smk) holds rules of those IDs only.
    for path in (REPO / "workflow" / "rules").glob("a*.smk"):
        named = {i.upper() for i in re.findall(r"a\d", path.stem)}
        found = set(re.findall(r"^rule (A\d)_", path.read_text(), flags=re.M))
        assert found and found <= named, (path.name, found)
        assert {d.rules for d in deliverables.DELIVERABLES if d.id in found} == {path.name}


def test_the_ddp_report_covers_exactly_its_deliverables():
    assert set(ddp_report.READS) == set(deliverables.reported_by("cs336_systems.report.ddp"))
    assert set(ddp_report.READS_TRACES) | set(ddp_report.READS_C1) <= set(ddp_report.READS)
    for wanted in ddp_report.READS.values():
        assert wanted is None or set(wanted) <= set(variants.names())


def test_variants_live_in_deliverables_that_measure_them():
    for v in variants.VARIANTS:
        assert deliverables.get(v.deliverable).needs == deliverables.RANKS
    with pytest.raises(ValueError, match="unknown deliverable 'C13'"):
        deliverables.get("C13")


def test_every_registered_back_end_and_implementation_loads():
    # Registered as strings (docs/design.md says why): a misspelled entry would fail only when run.
    from cs336_systems.attention.backends import BACKENDS, BENCH_IMPLS, load

    for table in (BACKENDS, BENCH_IMPLS):
        for name in table:
            assert callable(load(name, table)), name


@pytest.fixture(scope="module")
def planned() -> dict[str, dict[str, list[str]]]:
    """A dry run of the whole smoke DAG: rule -> {"input": [...], "output": [...]} (paths)."""
    snakemake = Path(sys.executable).with_name("snakemake")
    proc = subprocess.run([str(snakemake), "-n", "--forceall", "--cores", "1", "--config", "preset=smoke",
                           "run=registry-check"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rule, jobs = None, {}
    for line in proc.stdout.splitlines():
        head = re.match(r"^(?:local)?rule (\w+):$", line)
        if head:
            rule = head.group(1)
        field = re.match(r"^\s+(input|output): (.*)$", line)
        if rule and field:
            jobs.setdefault(rule, {}).setdefault(field.group(1), []).extend(
                path.strip() for path in field.group(2).split(","))
    return jobs


def test_report_rules_declare_the_registry_s_files_and_the_writeup_reads_them(planned):
    folder = "results/registry-check"
    for d in deliverables.DELIVERABLES:
        outputs = planned[d.report_rule]["output"]
        fixed = {f"{folder}/{d.id}/{f}" for f in d.files if "{point}" not in f}
        pointed = [f for f in d.files if "{point}" in f]
        assert fixed <= set(outputs), d.id
        assert len(outputs) - len(fixed) == sum(len([o for o in outputs if o.startswith(f"{folder}/{d.id}/{f.split('/')[0]}/")])
                                               for f in pointed), d.id
        assert set(outputs) <= set(planned["writeup"]["input"]), d.id


def test_measuring_rules_write_records_where_the_registry_says(planned):
    """Each record a measuring rule writes lies in one of the registry's record folders of the ID whose
    folder holds it (pipeline.run_folder looks for records there, and only there)."""
    measuring = {rule for d in deliverables.DELIVERABLES for rule in d.measures}
    written = [path for rule in measuring for path in planned[rule]["output"]]
    for path in written:
        found = re.fullmatch(r"results/registry-check/(\w+)/(\w+)/[^/]+\.json", path)
        if found:
            assert found.group(2) in deliverables.get(found.group(1)).record_folders, path
    assert any("/records/" in path for path in written)


def test_output_names_are_unique_and_tables_come_in_pairs():
    assert deliverables.tables("a", "b") == ("a.csv", "a.md", "b.csv", "b.md")
    assert deliverables.output_name("table.csv") == "table_csv"
    assert deliverables.output_name("timelines/{point}.png") == "timelines"
    assert deliverables.output_name(deliverables.SUMMARY) == "summary"
    for d in deliverables.DELIVERABLES:
        names = [deliverables.output_name(f) for f in d.files]
        assert len(set(names)) == len(names) and d.files[0] == deliverables.SUMMARY, d.id
        assert not any(f.startswith(("records/", "traces/")) for f in d.outputs), d.id


def test_every_report_reads_records_only_of_the_deliverables_the_registry_names(planned):
    """The folders whose records (and summaries) each report rule takes as input, in a dry run of
    the whole smoke DAG, are its own and those of the deliverables in its ``reads``. Traces are the
    config's (``DDP.traced``): a report that reads them may read any data-parallel folder's."""
    read: dict[str, dict[str, set[str]]] = {}
    for rule, fields in planned.items():
        if rule.endswith("_report"):
            for path in fields.get("input", []):
                found = re.match(r"\s*results/registry-check/(\w+)/(records|traces|summary\.json)", path)
                if found:
                    kind = "traces" if found.group(2) == "traces" else "records"
                    read.setdefault(rule, {}).setdefault(kind, set()).add(found.group(1))
    assert set(read) >= {f"{d.id}_report" for d in deliverables.DELIVERABLES if d.measures}
    data_parallel = {v.deliverable for v in variants.VARIANTS}
    for d in deliverables.DELIVERABLES:
        found = read.get(d.report_rule, {})
        assert found.get("records", set()) - {d.id} == set(d.reads), d.id
        assert not found.get("traces") or d.traces and found["traces"] <= data_parallel, d.id


def test_no_rule_imports_report_code():
    """Reading the Snakefile must load no report (pandas, matplotlib), and no report decides what is
    measured: rules name a report module only in the command they run, and read the registry."""
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        for line in path.read_text().splitlines():
            assert not re.match(r"\s*(from\s+cs336_systems\.report|import\s+cs336_systems\.report)", line), (path.name, line)
            assert not re.match(r"\s*from\s+cs336_systems\s+import\s+.*\breport\b", line), (path.name, line)


def test_a_data_parallel_section_reads_its_variants_and_the_baseline():
    chosen = ["no-comm", "naive", "bucketed-25", "bucketed-avg-25", "fsdp"]
    assert deliverables.variants_read("C2", chosen) == ["no-comm", "naive"]
    assert deliverables.variants_read("C8", chosen) == chosen            # C8 reads every variant of the run
    assert deliverables.variants_read("C12", chosen) == ["no-comm", "fsdp"]
