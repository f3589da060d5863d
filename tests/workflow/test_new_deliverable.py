"""Adding a deliverable takes at most six files: the registry is the one place that knows IDs.

In a copy of the checkout (what git tracks or would, without the committed runs), a dummy
deliverable Z1 is added as a person would add one: its registry entry, its rule file, one module
that measures and reports (with its summary's contract, ``CONTRACTS``), its section template, its
block in config.yaml and its row in README's map. Nothing else names it: the Snakefile includes its
rule file, the config check requires its block, the writeup gives it a section and checks its summary
against its schema, all because the registry lists it. The registry's own tests pass in the copy, and
the smoke preset with ``sections=Z1`` measures Z1 alone and writes its section from its record; the
summary schemas' tests then hold Z1's template to its schema and its summary to both.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workflow.test_snakemake import REPO, SNAKEMAKE, _show, env_for, job_stats, snakemake

MOST_FILES = 6
TERMS = 12                    # the smoke preset's Z1 setting: the record's sum is that of 0..11 squared

REGISTRY_ENTRY = '''\
    Deliverable("Z1", "A dummy deliverable", "z1_dummy.smk", f"{_S}.dummy", f"{_S}.dummy", CPU, ("Z1_measure",),
                outputs=tables("table")),
'''

RULES = '''\
# Z1: a dummy deliverable (tests/workflow/test_new_deliverable.py adds it to a copy of the tree).


rule Z1_measure:
    """The sum of the first `terms` squares: one record."""
    input:
        measuring_code("cs336_systems.dummy", deliverable="Z1"),
    output:
        f"{RESULTS}/Z1/records/squares.json",
    log:
        f"{LOGS}/Z1/measure.log",
    benchmark:
        f"{BENCHMARKS}/Z1/measure.tsv",
    params:
        terms=GRID["Z1"]["terms"],
    shell:
        logged("python -m cs336_systems.dummy measure --terms {params.terms} --out {output} > {log} 2>&1")


rule Z1_report:
    """Z1's table and the numbers the writeup quotes."""
    input:
        record=rules.Z1_measure.output,
        code=code("cs336_systems.dummy"),
    output:
        **report_outputs("Z1"),
    log:
        f"{LOGS}/Z1/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.dummy report --record {input.record} --out-dir {params.out_dir} > {log} 2>&1")
'''

MODULE = '''\
"""Z1, a dummy deliverable: the squares of 0..n-1 and their sum, measured into a record and reported.

    python -m cs336_systems.dummy measure --terms 12 --out squares.json
    python -m cs336_systems.dummy report --record squares.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report.contract import Summary


@dataclass(frozen=True)
class Z1Summary(Summary):
    """What writeup/templates/sections/Z1.md.j2 reads of the summary."""
    terms: int
    sum: int


CONTRACTS = {"Z1": Z1Summary}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.dummy", description=__doc__.split("\\n\\n")[0])
    steps = p.add_subparsers(dest="step", required=True)
    measure = steps.add_parser("measure")
    measure.add_argument("--terms", type=int, required=True)
    measure.add_argument("--out", required=True)
    report = steps.add_parser("report")
    report.add_argument("--record", required=True)
    report.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    if args.step == "measure":
        rows = [{"n": n, "square": n * n} for n in range(args.terms)]
        metrics = {"rows": rows, "sum": sum(row["square"] for row in rows)}
        write_json_atomic(args.out, make_record("Z1", {"terms": args.terms}, "ok", metrics))
        return 0
    import pandas as pd

    from cs336_systems.report import contract
    from cs336_systems.report.common import load_records, run_provenance, write_table

    records = load_records([args.record])
    write_table(pd.DataFrame(records[0]["metrics"]["rows"]), args.out_dir)
    contract.write(args.out_dir / "summary.json", Z1Summary(run_provenance(records), records[0]["params"]["terms"],
                                                            records[0]["metrics"]["sum"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

TEMPLATE = '''\
{% from "sections/_run.md.j2" import run_line %}
{{ heading }}

{{ run_line(d.provenance) }}

The squares of 0 to {{ d.terms - 1 }} add up to **{{ d.sum }}**.

{{ table() }}
'''

README_ROW = "| Z1 | A dummy deliverable | `Z1_measure`, `Z1_report` in `z1_dummy.smk` | `dummy` | `dummy` | – |"

pytestmark = pytest.mark.skipif(not SNAKEMAKE.exists() or shutil.which("git") is None,
                                reason="needs snakemake beside this Python, and git")


def tree_copy(dest: Path) -> Path:
    """The checkout as git sees it (tracked files and untracked ones not ignored, as they are now),
    without the committed runs' results and writeups."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    runs = tuple(f"{Path(p).parent.as_posix()}/" for p in listed if re.fullmatch(r"writeup/[^/]+/writeup\.md", p))
    for rel in listed:
        if rel and not rel.startswith(("results/", *runs)) and (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


def edit(path: Path, pattern: str, new, count: int = 1) -> None:
    """Replace each of the ``count`` matches of ``pattern`` (a line pattern) in ``path`` by ``new``
    (the text, or a function of the match)."""
    text = path.read_text()
    assert len(re.findall(pattern, text, flags=re.M)) == count, (path, pattern)
    path.write_text(re.sub(pattern, new if callable(new) else lambda m: new, text, flags=re.M))


def add_z1(copy: Path) -> None:
    """What a person writes to add Z1."""
    edit(copy / "src" / "cs336_systems" / "deliverables.py", r"^\)\n\nBY_ID", f"{REGISTRY_ENTRY})\n\nBY_ID")
    (copy / "workflow" / "rules" / "z1_dummy.smk").write_text(RULES)
    (copy / "src" / "cs336_systems" / "dummy.py").write_text(MODULE)
    (copy / "writeup" / "templates" / "sections" / "Z1.md.j2").write_text(TEMPLATE)
    edit(copy / "config.yaml", r"^  (full|smoke):\n", lambda m: f"{m.group(0)}    Z1:\n      terms: "
         f"{1000 if m.group(1) == 'full' else TERMS}\n", count=2)
    readme = copy / "README.md"
    rows = [line for line in readme.read_text().splitlines() if re.match(r"^\| [A-Z]\d+ \|", line)]
    edit(readme, rf"^{re.escape(rows[-1])}\n", lambda m: f"{m.group(0)}{README_ROW}\n")


@pytest.mark.slow
def test_a_new_deliverable_takes_six_files_and_runs(tmp_path):
    copy = tree_copy(tmp_path / "repo")
    before = digests(copy)
    add_z1(copy)
    after = digests(copy)
    touched = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert len(touched) <= MOST_FILES, touched

    # The registry's own checks, and README's map, hold with Z1 in it.
    env = env_for(copy)
    checks = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "tests/systems/test_deliverables.py", "tests/systems/test_config.py"],
                            cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert checks.returncode == 0, _show(checks)
    readme = subprocess.run([sys.executable, "-c", "from workflow import readme\n"
                             "assert readme.id_map_shown() == readme.id_map_rows(), readme.id_map_shown()[-1]"],
                            cwd=copy / "tests", env=env, capture_output=True, text=True, timeout=120)
    assert readme.returncode == 0, _show(readme)

    proc = snakemake(copy, "--cores", "2", "--config", "preset=smoke", "sections=Z1")
    assert proc.returncode == 0, _show(proc)
    # Z1 alone is measured and reported: no other deliverable's job runs.
    assert set(job_stats(proc.stdout + proc.stderr)) == {"Z1_measure", "Z1_report", "writeup", "all"}
    results = copy / "results" / "smoke"
    assert {p.name for p in results.iterdir() if p.is_dir()} == {"Z1", "logs", "benchmarks"}

    record = json.loads((results / "Z1" / "records" / "squares.json").read_text())
    assert record["status"] == "ok" and record["metrics"]["sum"] == sum(n * n for n in range(TERMS))
    md = (copy / "writeup" / "smoke" / "writeup.md").read_text()
    section = md.split("\n## Z1. A dummy deliverable\n", 1)[1]
    assert f"add up to **{record['metrics']['sum']}**" in section and "Not built yet" not in section
    assert "[Z1. A dummy deliverable](#z1-a-dummy-deliverable)" in md            # in the contents
    assert 'id="Z1"' in (copy / "writeup" / "smoke" / "writeup.html").read_text()

    # Z1's schema: found through the registry, declaring what its template reads and nothing more,
    # and its summary fits it (the copy's only summary: the committed runs' are not copied).
    schema_checks = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                                    "tests/writeup/test_summary_schemas.py", "-k",
                                    "section_has_a_schema or fits_its_schema or Z1"],
                                   cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert schema_checks.returncode == 0, _show(schema_checks)
    for test in ("test_every_section_has_a_schema", "test_every_summary_fits_its_schema[smoke/Z1]",
                 "test_the_schema_declares_what_the_template_reads[Z1]",
                 "test_the_schema_declares_nothing_the_template_does_not_read[Z1]"):
        assert f"::{test} PASSED" in schema_checks.stdout, _show(schema_checks)
