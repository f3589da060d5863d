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
CHOSEN = ["no-comm", "naive", "flat", "overlap", "bucketed-1", "bucketed-100", "torch-ddp", "overlap-sharded", "fsdp", "fsdp-bf16"]
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
    assert list(pd.read_csv(_report(run, "C3") / "table.csv")["variant"]) == ["no-comm", "naive", "torch-ddp"]
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


def test_phase_annotations_do_not_hide_a_wait(seed):
    # Naive DDP's shape: backward's kernels, then the compute stream idle while every gradient is
    # all-reduced, then the optimizer. The GPU-side phase bars span it all and must not count.
    rng = random.Random(seed)
    wait_us = rng.uniform(30_000, 60_000)
    kernels, t = [], 0.0
    while t < 500_000:
        kernels.append({"lane": "compute", "name": "gemm", "start_us": t, "end_us": t + 90.0})
        t += 100.0                                      # 10 µs launch gaps
    resume = kernels[-1]["end_us"] + wait_us
    kernels.append({"lane": "communication", "name": "ncclAllReduce", "start_us": kernels[-1]["end_us"], "end_us": resume})
    kernels.append({"lane": "compute", "name": "adamw", "start_us": resume, "end_us": resume + 5_000})
    phases = [{"lane": "compute", "name": f"phase:{p}", "start_us": 0.0, "end_us": resume + 5_000}
              for p in ("backward", "wait")]
    gaps = ddp.compute_gaps(kernels + phases)
    assert gaps["longest_gap_ms"] == pytest.approx(wait_us / 1e3)
    assert gaps["gaps_over_half_ms"] == 1
    assert gaps["idle_ms"] == pytest.approx(wait_us / 1e3 + (len(kernels) - 3) * 0.010, rel=1e-6)


def test_the_bucket_model_counts_the_bytes_the_variants_send(run):
    summary = json.loads((_report(run, "C8") / "summary.json").read_text())
    assert summary["model"]["grad_MB"] == pytest.approx(2_000_000_000 * 4 / 1e6)      # fp32 buckets
    assert summary["model"]["gradient_dtype"] == "fp32"
    assert variants.lookup("fsdp-bf16").gradient_bytes == 2 and variants.lookup("bucketed-5").gradient_bytes == 4


def test_the_bucket_model_plot_is_log_log_and_marks_the_real_bucket_counts(run):
    import matplotlib.pyplot as plt

    table = pd.read_csv(_report(run, "C8") / "table.csv")
    fig, ax = plt.subplots()
    ddp.plot_bucket_model(table, 8e9, 5e-5, 1e11, ax)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    real = [line for line in ax.get_lines() if line.get_label() == "model at the real bucket count"][0]
    assert list(real.get_ydata()) == pytest.approx(list(table["predicted_ms"]))
    plt.close(fig)


def test_overhead_is_the_step_against_the_baseline_of_the_same_run(run):
    table = pd.read_csv(_report(run, "C3") / "table.csv")
    base = table.loc[table["variant"] == "no-comm", "step_ms"].iloc[0]
    assert list(table["overhead_ms"]) == pytest.approx(list(table["step_ms"] - base), abs=2e-3)
    assert list(table["overhead_pct"]) == pytest.approx(list(100 * (table["step_ms"] - base) / base), abs=1e-3)
    # A run without the baseline shows no overhead column rather than one against nothing.
    records = [json.loads((run / "C3" / "records" / f"{v}.json").read_text()) for v in ("naive", "torch-ddp")]
    assert "overhead_ms" not in ddp.step_table(records).columns
