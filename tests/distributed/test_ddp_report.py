"""report.ddp: one report per deliverable C2–C8, C10–C12, each writing its own folder, rendered by
its own section template. Records and traces are synthetic (seeded), shaped as train_bench writes them."""

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from cs336_systems.distributed import traces, variants
from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report import ddp
from cs336_systems.report.writeup import Renderer

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
CHOSEN = ["naive", "flat", "overlap", "bucketed-1", "bucketed-100", "torch-ddp", "overlap-sharded", "fsdp", "fsdp-bf16"]
GIB = 2**30


def _record(variant: str, rng: random.Random) -> dict:
    steps = []
    for _ in range(3):
        phases = {"forward_ms": rng.uniform(200, 260), "backward_ms": rng.uniform(450, 520),
                  "comm_wait_ms": rng.uniform(0, 40), "optimizer_ms": rng.uniform(25, 55)}
        steps.append(phases | {"step_ms": sum(phases.values())})
    memory = {"after_init": rng.uniform(6, 8) * GIB, "before_step": rng.uniform(20, 30) * GIB,
              "after_step": rng.uniform(20, 30) * GIB, "peak": rng.uniform(40, 60) * GIB,
              "forward_backward_peak_above_start": rng.uniform(25, 35) * GIB,
              "breakdown_before_step": {"parameters": 7.4 * GIB, "gradients": 7.4 * GIB, "optimizer_state": 14.9 * GIB}}
    metrics = {k: sorted(s[k] for s in steps)[1] for k in steps[0]} | {
        "steps": steps, "memory_per_rank": [memory, memory], "parameter_count": 2_000_000_000,
        "buckets": rng.randint(2, 400) if variant.startswith("bucketed-") else None}
    metrics["comm_share"] = metrics["comm_wait_ms"] / metrics["step_ms"]
    params = {"variant": variant, "size": "xl", "context": 512, "global_batch": 8, "warmup": 2, "steps": 3,
              "world_size": 2, "backend": "nccl"}
    return make_record(variants.lookup(variant).deliverable, params, "ok", metrics)


def _trace(rng: random.Random) -> list[dict]:
    out, t = [], 0.0
    for _ in range(200):
        start = t + rng.uniform(0, 2000)
        t = start + rng.uniform(10, 500)
        out.append({"lane": rng.choice(["compute", "compute", "communication"]), "name": "k", "start_us": start,
                    "end_us": t})
    return out


@pytest.fixture
def run(tmp_path):
    rng = random.Random(7)
    results = tmp_path / "results" / "r"
    for v in CHOSEN:
        ident = variants.lookup(v).deliverable
        write_json_atomic(results / ident / "records" / f"{v}.json", _record(v, rng))
        traces.write(results / ident / "traces" / f"{v}.json.gz", v, _trace(rng))
    c1 = results / "C1" / "summary.json"
    write_json_atomic(c1, {"fits": {"nccl_x2": {"o_ms": 0.05, "w_GBps": 100.0}}})
    return results


def _report(results: Path, ident: str, traced=("naive", "overlap", "fsdp")) -> Path:
    chosen = ddp.reads(ident, CHOSEN)
    args = [ident, "--records", *(str(results / variants.lookup(v).deliverable / "records" / f"{v}.json") for v in chosen),
            "--out-dir", str(results / ident)]
    if ident in ddp.READS_TRACES:
        args += ["--traces", *(str(results / variants.lookup(v).deliverable / "traces" / f"{v}.json.gz")
                               for v in traced), "--traced", *traced]
    if ident in ddp.READS_C1:
        args += ["--c1-summary", str(results / "C1" / "summary.json")]
    assert ddp.main(args) == 0
    return results / ident


@pytest.mark.parametrize("ident", ddp.SECTIONS)
def test_each_deliverable_writes_its_own_folder_and_section(run, ident, tmp_path):
    folder = _report(run, ident)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["provenance"]["records"] == len(ddp.reads(ident, CHOSEN))
    table = pd.read_csv(folder / "table.csv")
    expected = [v for v in ddp.reads(ident, CHOSEN) if ident != "C8" or v.startswith("bucketed-")]
    assert list(table["variant"]) == expected
    for figure in {"C6": ["timeline.png"], "C8": ["phases.png", "overhead_model.png"], "C12": ["timeline.png"]}.get(ident, []):
        assert (folder / figure).stat().st_size > 0
    for fmt in ("md", "html"):
        text = Renderer(fmt, tmp_path / "w" / f"w.{fmt}", TEMPLATES).section(ident, folder / "summary.json")
        assert "not measured in this run" not in text.split("**Against")[0] or ident == "C11", text


def test_c3_is_naive_and_its_anchor_and_c8_has_every_variant(run):
    assert list(pd.read_csv(_report(run, "C3") / "table.csv")["variant"]) == ["naive", "torch-ddp"]
    c8 = _report(run, "C8")
    assert list(pd.read_csv(c8 / "variants.csv")["variant"]) == CHOSEN
    predicted = pd.read_csv(c8 / "table.csv")["predicted_ms"]
    assert predicted.notna().all() and (predicted > 0).all()


def test_only_traced_variants_enter_the_gaps(run):
    summary = json.loads((_report(run, "C12", traced=("overlap", "fsdp")) / "summary.json").read_text())
    assert set(summary["compute_gaps"]) == {"overlap", "fsdp"}


def test_a_report_refuses_another_deliverable(run, capsys):
    with pytest.raises(SystemExit):
        ddp.main(["C9", "--records", "x.json", "--out-dir", str(run / "C9")])
    assert "invalid choice: 'C9'" in capsys.readouterr().err
