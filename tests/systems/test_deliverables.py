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


def test_ids_are_the_assignment_s_in_order():
    assert deliverables.IDS == (*(f"A{i}" for i in range(1, 7)), *(f"B{i}" for i in range(1, 6)),
                                *(f"C{i}" for i in range(1, 13)))
    assert list(SECTIONS) == list(deliverables.IDS)           # the writeup reads titles and order here


@pytest.mark.parametrize("d", deliverables.DELIVERABLES, ids=lambda d: d.id)
def test_one_hop_from_the_id(d, rule_names):
    assert (REPO / "workflow" / "rules" / d.rules).is_file()
    assert (REPO / "writeup" / "templates" / d.section).is_file()
    assert module_file(d.module) is not None and module_file(d.report) is not None
    assert d.report_rule in rule_names
    assert d.folder("h200") == f"results/h200/{d.id}"
    assert d.needs in (deliverables.CPU, deliverables.ONE_GPU, deliverables.RANKS)


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
    # Registered as strings (README, "Layout" says why): a misspelled entry would fail only when run.
    from cs336_systems.attention.backends import BACKENDS, BENCH_IMPLS, load

    for table in (BACKENDS, BENCH_IMPLS):
        for name in table:
            assert callable(load(name, table)), name
