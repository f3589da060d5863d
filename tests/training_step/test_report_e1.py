"""The E1 report on synthetic records whose answers are known: the ladder table with an OOM and a
skipped row, the figure, and the section's claims about the goal conditioned on the numbers."""
import json
from pathlib import Path

import pytest

from cs336_systems.models import get_size
from cs336_systems.profiling.step_kernels import KINDS
from cs336_systems.profiling.flops import model_step_flops
from cs336_systems.records import make_record, write_json_atomic
from cs336_systems.report import e1, writeup
from cs336_systems.training_step import rungs

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"
GPU, BF16_PEAK = "NVIDIA H100 80GB HBM3", 989e12
SIZE, CONTEXT, BATCH = "2.7B", 1024, 4


def _ms_at(mfu: float) -> float:
    return model_step_flops(get_size(SIZE), batch=BATCH, context=CONTEXT, mode="train-step") / (mfu * BF16_PEAK) * 1e3


def record(rung: str, status="ok", ms=None, loss=9.47, peak_gib=40.0, reason=None, context=CONTEXT,
           losses=None, gradients=None) -> dict:
    setup = rungs.get(rung).setup
    params = {"size": SIZE, **get_size(SIZE).__dict__, "vocab_size": 10_000, "context": context, "batch": BATCH,
              "mode": "train-step", "rung": rung, "anchor": rungs.get(rung).anchor, "adds": rungs.get(rung).adds,
              "previous_rung": rungs.previous(rung), **setup.__dict__, "optimizer": setup.optimizer,
              "compile_mode": "model" if setup.compiled else None, "compile_backend": "inductor" if setup.compiled else None,
              "checkpoint_group": 4 if setup.checkpointed else None, "warmup": 3, "steps": 8, "seed": 0,
              "device": "cuda", "float32_matmul_precision": "highest"}
    metrics = {}
    if status == "ok":
        samples = [ms * f for f in (0.99, 1.0, 1.01, 1.0)]
        step = {"mean": ms, "std": 0.01 * ms, "median": ms, "min": min(samples), "max": max(samples), "n": 4,
                "samples": samples}
        metrics = {"step": step, "forward": {"median": 0.3 * ms}, "backward": {"median": 0.6 * ms},
                   "optimizer": {"median": 0.1 * ms}, "loss": loss, "peak_memory_bytes": int(peak_gib * 2**30),
                   "tokens_per_s": BATCH * context / (ms / 1e3)}
        if losses is not None:                  # what the job keeps beyond the first loss (training_step.check)
            metrics |= {"losses": [loss, *losses], "gradient_rel_error": gradients}
    r = make_record("E1", params, status, metrics, reason=reason)
    r["provenance"]["gpu"] = GPU
    return r


def ladder(best_ms: float, anchor_ms: float) -> list[dict]:
    """fp32 out of memory at the goal point (so losses there check against nothing) is not what we
    want here: fp32 runs; checkpointed is skipped (the rung before fits); the cuDNN anchor is OOM."""
    return [record("fp32", ms=4 * best_ms, peak_gib=70), record("bf16", ms=2 * best_ms, loss=9.4702),
            record("flash", ms=1.3 * best_ms, peak_gib=30, loss=9.4701), record("compiled", ms=1.1 * best_ms, peak_gib=28),
            record("fused-adamw", ms=best_ms, peak_gib=28),
            record("checkpointed", "skipped", reason="not needed: the previous rung (fused-adamw) fits"),
            record("anchor-sdpa-flash", ms=anchor_ms), record("anchor-sdpa-cudnn", "oom", reason="CUDA out of memory"),
            record("fp32", "oom", reason="CUDA out of memory", context=2048)]


def build(tmp_path: Path, records: list[dict], planned: tuple[str, ...] = (), profiles: tuple[dict, ...] = ()
          ) -> tuple[dict, str]:
    paths = []
    for r in records:           # named as the DAG names them: <size>_ctx<context>_<rung>
        p = r["params"]
        paths.append(str(write_json_atomic(tmp_path / "records" / f"{p['size']}_ctx{p['context']}_{p['rung']}.json", r)))
    profile_paths = [str(write_json_atomic(tmp_path / "profiles" / f"{i}.json", r)) for i, r in enumerate(profiles)]
    out = tmp_path / "E1"
    assert e1.main(["--records", *paths, "--goal-size", SIZE, "--goal-context", str(CONTEXT), "--goal-mfu", "0.55",
                    "--out-dir", str(out), "--planned", *paths, *planned, "--profiles", *profile_paths]) == 0
    for name in ("table.csv", "table.md", "kernels.csv", "kernels.md", "ladder.png", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    text = writeup.Renderer("md", tmp_path / "w" / "writeup.md", TEMPLATES).section("E1", out / "summary.json")
    return json.loads((out / "summary.json").read_text()), text


def test_the_goal_met_is_said_with_its_numbers(tmp_path):
    best = _ms_at(0.60)
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.05 * best))
    goal = summary["goal"]
    assert goal["met"] and goal["faster_or_equal"] and goal["mfu_met"] and goal["shortfalls"] == []
    assert goal["point"]["best_rung"]["rung"] == "fused-adamw"
    assert goal["point"]["best_rung"]["mfu"] == pytest.approx(0.60)
    assert "**is met**" in text and "is not met" not in text
    assert "our best rung (*fused-adamw*)" in text and "60.0 % MFU" in text and "4.8 % faster by median step time, a difference beyond the spread" in text
    table = (tmp_path / "E1" / "table.md").read_text()
    assert "OOM" in table and "SKIPPED" in table and "not needed: the previous rung (fused-adamw) fits" in table
    assert summary["statuses"] == {"ok": 6, "oom": 2, "skipped": 1, "error": 0}
    bought = {b["rung"]: b for b in summary["bought"]}
    assert bought["bf16"]["median_delta_pct"] == pytest.approx(-0.5) and bought["flash"]["median_delta_peak_gib"] == pytest.approx(-10)
    assert bought["checkpointed"]["points"] == 0
    assert summary["loss_out_of_tolerance"] == [] and "their forward passes agree" in text


def test_the_goal_missed_is_said_plainly_with_each_reason(tmp_path):
    best = _ms_at(0.45)
    records = ladder(best, anchor_ms=0.9 * best)
    records[3] = record("compiled", ms=0.5 * best, loss=9.60)      # fast and wrong: flagged, not ranked
    summary, text = build(tmp_path, records)
    goal = summary["goal"]
    assert not goal["met"] and goal["faster_or_equal"] is False and goal["mfu_met"] is False
    assert goal["point"]["best_rung"]["rung"] == "fused-adamw"
    assert "**is not met**" in text and "**is met**" not in text
    assert "11.1 % above the best anchor's (anchor-sdpa-flash" in text and "45.0 % MFU, below 55 %" in text
    assert "a difference within the spread" not in text         # 11 % apart, steps 1 % apart: beyond it
    assert "beyond the spread, ours is faster at 0 and slower at 1 (2.7B ctx 1024), every pair spanning processes" in text
    assert [r["rung"] for r in summary["loss_out_of_tolerance"]] == ["compiled"]
    assert "computes something other than fp32 eager** and is not ranked" in text
    assert "compiled at 2.7B ctx 1024 (losses up to 1.373 % from fp32 eager's)" in text
    assert "optimizer" in text and "10 %" in text      # the gap paragraph: the optimizer's share of the step


def test_an_unmeasured_goal_point_is_not_met(tmp_path):
    summary, text = build(tmp_path, [record("fp32", "oom", reason="CUDA out of memory"),
                                     record("anchor-sdpa-cudnn", "skipped", reason="needs CUDA")])
    assert not summary["goal"]["met"] and "no rung of our ladder ran there" in summary["goal"]["shortfalls"][0]
    assert "This run has no measured step of our ladder at 2.7B, context 1024" in text and "**is not met**" in text


def test_grid_points_without_a_record_are_named_as_not_measured(tmp_path):
    best = _ms_at(0.60)
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.05 * best),
                          planned=("records/xl_ctx2048_fp32.json", "records/xl_ctx2048_bf16.json"))
    assert summary["not_measured"] == ["xl_ctx2048_fp32", "xl_ctx2048_bf16"]
    assert summary["planned"] == len(ladder(best, anchor_ms=best)) + 2
    assert f"Not measured in this run: 2 of the grid's {summary['planned']} points (xl_ctx2048_fp32, xl_ctx2048_bf16)" in text
    assert summary["missing"] == {"rungs": [], "points": ["xl_ctx2048_fp32", "xl_ctx2048_bf16"]}


def test_a_rung_the_run_has_no_point_of_is_named_once_not_point_by_point():
    planned = [f"r/{size}_ctx{c}_{rung}.json" for size in ("xl", "2.7B") for c in (512, 1024)
               for rung in ("fp32", "bf16-weights", "anchor-liger")]
    missing = [p.split("/")[1][:-5] for p in planned if "fp32" not in p]
    missing.remove("xl_ctx512_anchor-liger")        # the run has one point of anchor-liger
    assert e1.missing_briefly(planned, missing) == {
        "rungs": ["bf16-weights"],
        "points": ["xl_ctx1024_anchor-liger", "2.7B_ctx512_anchor-liger", "2.7B_ctx1024_anchor-liger"]}
    assert e1.missing_briefly(planned, []) == {"rungs": [], "points": []}


def test_a_run_with_every_point_says_nothing_is_missing(tmp_path):
    best = _ms_at(0.60)
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.05 * best))
    assert summary["not_measured"] == [] and "Not measured in this run" not in text


def test_the_optimizer_floor_is_its_bytes_over_the_card_s_bandwidth():
    # 28 bytes a parameter (read p, g, m, v; write p, m, v in fp32) at the H100's 3.35 TB/s.
    gap_ = {"size": "2.7B", "context": 1024, "rung": "fused-adamw", "phases_ms": {"optimizer": 40.0},
            "updates_in_backward": False}
    record = {"params": {"size": "2.7B", "context": 1024, "rung": "fused-adamw", "optimizer": rungs.FUSED_ADAMW},
              "provenance": {"gpu": "NVIDIA H100 80GB HBM3"}, "metrics": {"parameters": 3_000_000_000}}
    floor = e1.optimizer_floor(gap_, [record])
    assert floor["floor_ms"] == pytest.approx(3e9 * 28 / 3.35e12 * 1e3)
    assert floor["over_floor"] == pytest.approx(40.0 / floor["floor_ms"])
    assert e1.optimizer_floor(gap_, [{**record, "provenance": {"gpu": None}}]) is None     # no card, no floor
    # our Triton AdamW, with or without bf16 copies, makes the same one pass; cs336_basics' makes several
    ours = rungs.get("bf16-weights").setup.optimizer
    assert e1.optimizer_floor(gap_, [{**record, "params": {**record["params"], "optimizer": ours}}]) == floor
    several = {**record["params"], "optimizer": rungs.OUR_ADAMW}
    assert e1.optimizer_floor(gap_, [{**record, "params": several}]) is None
    # updates that ran inside backward leave the optimizer phase empty: no floor to set it against
    assert e1.optimizer_floor({**gap_, "updates_in_backward": True}, [record]) is None


def test_a_lead_the_timed_steps_do_not_settle_is_said_to_be_unsettled(tmp_path):
    # 0.2 % apart with each step's standard deviation at 1 % over 4 steps: within two standard errors.
    best = _ms_at(0.60)
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.002 * best))
    assert summary["goal"]["point"]["best_vs_anchor_spread"] == "within the spread"
    assert "0.2 % faster by median step time: a difference the spread of the timed steps does not settle" in text
    # the other way round, the goal's shortfall says the gap is within the spread
    summary, text = build(tmp_path / "slower", ladder(best, anchor_ms=0.998 * best))
    assert "0.2 % above the best anchor's (anchor-sdpa-flash, " in text and "ms), a difference within the spread" in text


def profile_record(rung: str, kinds_ms: dict, step_ms: float, busy_ms: float, status="ok") -> dict:
    r = record(rung, status="ok" if status == "ok" else status, ms=step_ms, reason=None if status == "ok" else "CUDA out of memory")
    r["params"]["part"] = "profile"
    if status == "ok":
        kinds = {k: {"count": 10.0, "ms": kinds_ms.get(k, 0.0)} for k in KINDS}
        r["metrics"] = {"step": r["metrics"]["step"], "unit": "CUDA kernels", "kinds": kinds, "steps": 2,
                        "count_per_step": [60, 60], "time_ms": sum(kinds_ms.values()), "busy_ms": busy_ms,
                        "busy_share": busy_ms / step_ms}
    return r


def test_the_profiles_say_where_each_rung_s_kernel_time_goes(tmp_path):
    best = _ms_at(0.45)
    ours = profile_record("fused-adamw", {"GEMM": 120.0, "attention-softmax": 20.0, "elementwise": 40.0,
                                          "optimizer": 30.0}, step_ms=best, busy_ms=205.0)
    anchor = profile_record("anchor-sdpa-cudnn", {}, step_ms=best, busy_ms=0.0, status="oom")
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.05 * best), profiles=(ours, anchor))
    assert [p["rung"] for p in summary["profiles"]] == ["fused-adamw", "anchor-sdpa-cudnn"]
    assert summary["profiles"][1]["status"] == "oom"
    assert "*fused-adamw* at 2.7B, context 1024: matrix products 120.0 ms, attention 20.0 ms" in text
    assert f"busy 205.0 ms, {100 * 205.0 / best:.1f} % of its {best:.1f} ms step" in text
    assert "This run holds no kernel profile" not in text
    kernels = (tmp_path / "E1" / "kernels.md").read_text()
    assert "GEMM" in kernels and "57.1 %" in kernels and "OOM" in kernels     # 120 of 210 ms


def test_without_profiles_the_section_says_it_cannot_apportion_the_gap(tmp_path):
    best = _ms_at(0.45)
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.05 * best))
    assert summary["profiles"] == [] and "This run holds no kernel profile" in text
    assert "(no rows)" in (tmp_path / "E1" / "kernels.md").read_text()


def _projection_flops() -> float:
    """The closed form's train-step FLOPs less the attention products: per layer, two products of
    2·B·N²·d_model FLOPs forward (heads × head width = d_model), three times for forward and backward."""
    size = get_size(SIZE)
    total = model_step_flops(size, batch=BATCH, context=CONTEXT, mode="train-step")
    return total - 3 * size.num_layers * 2 * (2 * BATCH * CONTEXT**2 * size.d_model)


def test_ours_against_the_anchor_names_the_kernel_kind_where_they_part(tmp_path):
    best = _ms_at(0.45)
    ours = profile_record("fused-adamw", {"GEMM": 120.0, "attention-softmax": 20.0, "elementwise": 40.0,
                                          "optimizer": 30.0}, step_ms=best, busy_ms=205.0)
    anchor = profile_record("anchor-sdpa-flash", {"GEMM": 119.5, "attention-softmax": 12.0, "elementwise": 40.4,
                                                  "optimizer": 30.0}, step_ms=best - 6.0, busy_ms=199.0)
    summary, text = build(tmp_path, ladder(best, anchor_ms=1.002 * best), profiles=(ours, anchor))
    kc = summary["kernel_comparison"]
    assert kc["anchor"]["rung"] == "anchor-sdpa-flash" and kc["anchor"]["largest"] == "attention-softmax"
    assert kc["anchor"]["delta_ms"]["attention-softmax"] == pytest.approx(8.0)
    assert kc["anchor"]["others_max_abs_ms"] == pytest.approx(0.5)
    assert kc["gemm_tflops"] == pytest.approx(_projection_flops() / 0.120 / 1e12)
    assert kc["bound"] is None              # the synthetic records name no parameter count: no optimizer floor
    flat = " ".join(text.split())
    assert ("*fused-adamw*'s attention kernels take 8.0 ms a step more than *anchor-sdpa-flash*'s; "
            "no other kind differs by more than 0.5 ms. Its kernels are busy 6.0 ms longer and its profiled step "
            "is 6.0 ms longer; the ladder's own processes") in flat
    assert "which step is faster is not settled; the kind of kernel where they part is." in flat
    assert kc["anchor"]["largest_stands_out"]
    # Attention 1.0 ms apart beside GEMMs 0.8 apart: no kind stands out.
    close = profile_record("anchor-sdpa-flash", {"GEMM": 119.2, "attention-softmax": 19.0, "elementwise": 40.0,
                                                 "optimizer": 30.0}, step_ms=best - 1.0, busy_ms=204.0)
    # with two anchors profiled, the best anchor's profile is the one set against ours
    assert e1.kernel_comparison([ours, close, anchor], None, None, 0.55, "anchor-liger")["anchor"]["rung"] == \
        "anchor-sdpa-flash"
    liger = {**anchor, "params": {**anchor["params"], "rung": "anchor-liger"}}
    assert e1.kernel_comparison([ours, close, liger], None, None, 0.55, "anchor-liger")["anchor"]["rung"] == "anchor-liger"
    kc = e1.kernel_comparison([ours, close], None, None, 0.55)
    assert kc["anchor"]["largest"] == "attention-softmax" and not kc["anchor"]["largest_stands_out"]
    assert f"at {_projection_flops() / 0.120 / 1e12:.0f} TFLOP/s" in flat


def test_the_goal_leaves_the_step_it_allows_less_the_gemms_and_the_optimizer_floor():
    ours = profile_record("fused-adamw", {"GEMM": 120.0, "attention-softmax": 20.0, "elementwise": 40.0,
                                          "optimizer": 30.0}, step_ms=215.0, busy_ms=210.0)
    gap_ = {"rung": "fused-adamw", "size": SIZE, "context": CONTEXT}
    kc = e1.kernel_comparison([ours], gap_, {"floor_ms": 28.0}, goal_mfu=0.55)
    total = model_step_flops(get_size(SIZE), batch=BATCH, context=CONTEXT, mode="train-step")
    assert kc["anchor"] is None
    assert kc["bound"]["ms"] == pytest.approx(148.0)
    assert kc["bound"]["mfu"] == pytest.approx(total / 0.148 / BF16_PEAK)
    assert kc["bound"]["goal_ms"] == pytest.approx(total / (0.55 * BF16_PEAK) * 1e3)
    assert kc["bound"]["room_ms"] == pytest.approx(kc["bound"]["goal_ms"] - 148.0)
    assert kc["bound"]["rest_now_ms"] == pytest.approx(210.0 - 148.0)
    assert kc["bound"]["cut_share"] == pytest.approx(1 - kc["bound"]["room_ms"] / (210.0 - 148.0))
    # With a slow enough goal the rest fits, and nothing need go.
    assert e1.kernel_comparison([ours], gap_, {"floor_ms": 28.0}, goal_mfu=0.30)["bound"]["cut_share"] == 0.0
    assert e1.kernel_comparison([], None, None, 0.55) is None
    # The optimizer floor of another point is not this profile's; GEMMs that include naive
    # attention's products are not the projections alone.
    assert e1.kernel_comparison([ours], {**gap_, "context": 2048}, {"floor_ms": 28.0}, 0.55)["bound"] is None
    naive = {**ours, "params": {**ours["params"], "attention": "naive"}}
    assert e1.kernel_comparison([naive], gap_, {"floor_ms": 28.0}, 0.55)["gemm_tflops"] is None


def test_what_a_rung_bought_counts_only_changes_beyond_the_spread(tmp_path):
    # fused-adamw 0.2 % below compiled, each step's standard deviation 1 % over 4 steps: within the
    # spread, so neither faster nor slower there; bf16 (half of fp32's time) is faster beyond it.
    best = _ms_at(0.45)
    records = [r if r["params"]["rung"] != "compiled" else record("compiled", ms=1.002 * best, peak_gib=28)
               for r in ladder(best, anchor_ms=1.05 * best)]
    summary, text = build(tmp_path, records)
    bought = {b["rung"]: b for b in summary["bought"]}
    assert (bought["fused-adamw"]["faster_at"], bought["fused-adamw"]["slower_at"],
            bought["fused-adamw"]["within_spread_at"]) == (0, 0, 1)
    assert (bought["bf16"]["faster_at"], bought["bf16"]["within_spread_at"]) == (1, 0)
    assert "| fused-adamw | 1 | -0.4 | -0.2 % | 0 | 0 | 1 | 1 | +0.00 |" in text     # 1: across processes
    assert "so 4 of the comparisons with the rung before span processes" in text


def _in_one_job(records: list[dict], rounds_of) -> list[dict]:
    """``records`` as one job's: ``turns`` shared, every round's samples (``rounds_of(rung)``: one
    list per round) with the step summary made from them."""
    names = [r["params"]["rung"] for r in records]
    for r in records:
        r["metrics"]["turns"] = {"job": "j1", "with": names, "rounds": 4, "steps": 2, "warmup": 3}
        if r["status"] != "ok":
            continue
        per_round = rounds_of(r["params"]["rung"], r["metrics"]["step"]["median"])
        samples = [t for rd in per_round for t in rd]
        ordered = sorted(samples)
        r["metrics"]["step"] = {"mean": sum(samples) / len(samples), "std": 0.01, "median": ordered[len(ordered) // 2],
                                "min": ordered[0], "max": ordered[-1], "n": len(samples), "samples": samples}
        r["metrics"]["rounds"] = [{"step": rd} for rd in per_round]
        r["params"]["rounds"] = len(per_round)
    return records


def test_a_point_measured_in_one_job_is_judged_by_the_paired_difference_per_round(tmp_path):
    """Ours 1 % below the anchor in every round while both drift together by ±10 % from round to
    round: the unpaired test on the means (each with a 10 % spread) would say "within"; the paired
    difference per round settles it. A rung 0.2 % faster in two rounds and slower in one is within."""
    best = _ms_at(0.45)
    drift = (1.0, 1.1, 0.9, 1.05)
    factors = {"anchor-sdpa-flash": [1.0] * 4, "fused-adamw": [0.99] * 4, "compiled": [1.002, 1.002, 0.99, 1.002]}

    def rounds_of(rung, ms):
        return [[ms * d * f, ms * d * f] for d, f in zip(drift, factors.get(rung, [1.0] * 4))]

    records = _in_one_job([r for r in ladder(best, anchor_ms=best) if r["params"]["context"] == CONTEXT], rounds_of)
    for r in records:
        if "rounds" in r["metrics"]:
            r["metrics"]["step"]["std"] = 0.1 * r["metrics"]["step"]["mean"]
    summary, text = build(tmp_path, records)
    point = summary["points"][0]
    judged = point["best_vs_anchor_judged"]
    assert judged["paired"] and judged["rounds"] == 4 and point["best_vs_anchor_spread"] == "lower"
    assert judged["difference_ms"] == pytest.approx(-0.01 * best, rel=0.15)
    assert summary["jobs"] == 1 and summary["unpaired_records"] == 0 and summary["comparisons_across_processes"] == 0
    assert "a paired difference beyond its spread across 4 rounds in one job" in text
    assert "beyond the spread, ours is faster at 1 (2.7B ctx 1024) and slower at 0, each pair taking turns in one job" in text
    assert "One job per size × context (1 job)" in text and "span processes" not in text
    bought = {b["rung"]: b for b in summary["bought"]}
    assert (bought["fused-adamw"]["faster_at"], bought["fused-adamw"]["across_processes_at"]) == (1, 0)
    assert bought["compiled"]["faster_at"] == 1         # 10 % below flash's 1.3x in every round
    table = (tmp_path / "E1" / "table.csv").read_text()
    assert "across processes" not in table


def test_a_pair_from_two_processes_hours_apart_says_so(tmp_path):
    best = _ms_at(0.45)
    records = ladder(best, anchor_ms=1.05 * best)
    stamps = {"fused-adamw": "2026-11-27T13:50:09+00:00", "anchor-sdpa-flash": "2026-11-27T17:48:00+00:00"}
    for r in records:
        r["provenance"]["utc"] = stamps.get(r["params"]["rung"], r["provenance"]["utc"])
    summary, text = build(tmp_path, records)
    judged = summary["points"][0]["best_vs_anchor_judged"]
    assert not judged["paired"] and judged["hours_apart"] == pytest.approx(3.965, abs=1e-3)
    assert "The two were measured in separate processes 4.0 h apart (in a run continued across machines lent" in text
    assert "so this comparison spans processes" in text
    assert "(across processes)" in (tmp_path / "E1" / "table.csv").read_text()


def test_every_row_s_mfu_is_against_the_bf16_peak_and_the_compiled_rung_says_what_it_compiled(tmp_path):
    best = _ms_at(0.40)
    summary, text = build(tmp_path, ladder(best, 1.1 * best))
    df = e1.records_frame([record("fp32", ms=4 * best), record("fused-adamw", ms=best)])
    # one denominator: fp32 eager at a quarter of the best rung's speed reads a quarter of its MFU
    assert list(df["mfu"]) == pytest.approx([0.10, 0.40], rel=1e-9)
    assert len(summary["peaks"]) == 1 and "bf16" in summary["peaks"][0]
    compiled = next(r for r in summary["ladder"] if r["rung"] == "compiled")
    assert compiled["adds"] == e1.COMPILED_AS["model"]
    blocks = [r | {"params": r["params"] | {"compile_mode": "blocks"}} if r["params"].get("compiled") else r
              for r in ladder(best, 1.1 * best)]
    assert e1.adds_as_run(rungs.get("compiled"), blocks) == e1.COMPILED_AS["blocks"]
    # the first loss checks the forward pass only, and the section says so
    assert "their forward passes agree" in text and "cannot see a backward pass or an optimizer step" in text
    assert "no rung is fast by computing something else" not in text


def _checked_ladder(best_ms: float, flash_gradients: dict, flash_later=(8.6626, 8.0907), flash_ms=None) -> list[dict]:
    """The ladder with what the job keeps beyond the first loss: three steps' losses, the first gradients'
    error per group (none for fp32 eager, the reference)."""
    fine = {"layers.attn.q_proj.weight": 0.014, "lm_head.weight": 0.007}
    fp32_later = (8.6626, 8.0906)
    return [record("fp32", ms=4 * best_ms, loss=9.4084, losses=fp32_later, gradients=None),
            record("bf16", ms=2 * best_ms, loss=9.4083, losses=(8.6626, 8.0907), gradients=fine),
            record("flash", ms=flash_ms or 1.3 * best_ms, loss=9.4083, losses=flash_later, gradients=flash_gradients),
            record("compiled", ms=1.1 * best_ms, loss=9.4083, losses=(8.6625, 8.0906), gradients=fine),
            record("fused-adamw", ms=best_ms, loss=9.4083, losses=(8.6625, 8.0905), gradients=fine),
            record("anchor-sdpa-flash", ms=1.05 * best_ms, loss=9.4083, losses=(8.6624, 8.0904), gradients=fine)]


def test_the_losses_after_updates_and_the_first_gradients_are_checked_and_said(tmp_path):
    best = _ms_at(0.5)
    summary, text = build(tmp_path, _checked_ladder(best, {"layers.attn.q_proj.weight": 0.015, "lm_head.weight": 0.008}))
    assert summary["loss_out_of_tolerance"] == [] and summary["loss_steps_compared"] == 3
    assert summary["grad_checked"] == 5 and summary["grad_unchecked"] == 0
    assert summary["grad_max"] == {"rel_error": 0.015, "group": "layers.attn.q_proj.weight", "rung": "flash",
                                   "size": SIZE, "context": CONTEXT}
    assert "computes what fp32 eager computes: its loss at each of its first 3 steps" in text
    assert "largest error 1.50 %: layers.attn.q_proj.weight of flash at 2.7B ctx 1024" in text
    assert "cannot see a backward pass" not in text
    table = (tmp_path / "E1" / "table.md").read_text()
    assert "1.50 % (layers.attn.q_proj.weight)" in table and "(3 steps)" in table


@pytest.mark.parametrize("wrong", ["gradients", "later loss"])
def test_a_rung_whose_gradients_or_later_losses_part_from_fp32_eager_s_is_flagged_and_not_ranked(tmp_path, wrong):
    """Its first loss agrees (a wrong backward or optimizer cannot move it): only what the job keeps
    beyond it can tell; the rung is the fastest and must not be ranked."""
    best = _ms_at(0.5)
    grads = {"layers.attn.q_proj.weight": 0.9 if wrong == "gradients" else 0.015, "lm_head.weight": 0.5 if wrong == "gradients" else 0.008}
    later = (8.6626, 8.30) if wrong == "later loss" else (8.6626, 8.0907)
    records = _checked_ladder(best, grads, later, flash_ms=0.5 * best)
    summary, text = build(tmp_path, records)
    [flagged] = summary["loss_out_of_tolerance"]
    assert flagged["rung"] == "flash" and flagged["grad_out"] is (wrong == "gradients")
    assert flagged["loss_out"] is (wrong == "later loss")
    assert summary["goal"]["point"]["best_rung"]["rung"] == "fused-adamw"
    if wrong == "gradients":
        assert "flash at 2.7B ctx 1024 (first gradients of layers.attn.q_proj.weight 90.0 % off)" in text
    else:
        assert "flash at 2.7B ctx 1024 (losses up to 2.588 % from fp32 eager's)" in text


def test_ours_is_the_gap_s_rung_where_profiled_else_the_highest_and_two_commits_are_said(tmp_path):
    kinds = {"GEMM": 120.0, "attention-softmax": 20.0, "elementwise": 40.0, "optimizer": 30.0}
    fused = profile_record("fused-adamw", kinds, step_ms=215.0, busy_ms=210.0)
    graphs = profile_record("cuda-graphs", {**kinds, "elementwise": 30.0}, step_ms=200.0, busy_ms=200.0)
    anchor = profile_record("anchor-sdpa-cudnn", kinds, step_ms=210.0, busy_ms=205.0)
    gap_ = {"rung": "cuda-graphs", "size": SIZE, "context": CONTEXT}
    # the gap's rung, though another of ours comes first
    assert e1.kernel_comparison([fused, graphs, anchor], gap_, None, 0.55)["rung"] == "cuda-graphs"
    # no gap, or the gap's rung not profiled: the ladder's highest profiled rung
    assert e1.kernel_comparison([fused, graphs, anchor], None, None, 0.55)["rung"] == "cuda-graphs"
    assert e1.kernel_comparison([fused, anchor], gap_, None, 0.55)["rung"] == "fused-adamw"
    kc = e1.kernel_comparison([graphs, anchor], gap_, None, 0.55)
    assert not kc["anchor"]["apart"]
    elsewhere = {**anchor, "provenance": {**anchor["provenance"], "commit": "f" * 40}}
    kc = e1.kernel_comparison([graphs, elsewhere], gap_, None, 0.55)
    assert kc["anchor"]["apart"] and kc["anchor"]["commits"][1] == "f" * 40
    assert kc["anchor"]["commits"][0] == (graphs["provenance"].get("commit") or "unknown")


def test_a_best_rung_that_updates_in_backward_is_said_to_and_gets_no_optimizer_floor(tmp_path):
    """Its optimizer phase is empty (the updates ran inside backward): the section says where they ran
    and sets no empty phase against the AdamW's bandwidth floor."""
    best = _ms_at(0.60)
    records = ladder(best, anchor_ms=1.05 * best)
    records.append(record("adamw-in-backward", ms=0.95 * best, peak_gib=28))
    records[-1]["metrics"]["optimizer"] = {"median": 0.0}
    summary, text = build(tmp_path, records)
    assert summary["gap"]["rung"] == "adamw-in-backward" and summary["gap"]["updates_in_backward"]
    assert summary["optimizer_floor"] is None
    assert "its updates ran inside backward, on a second stream beside it" in text
    assert "memory-bound floor" not in text


def test_a_row_without_a_gradient_check_shows_an_empty_cell_not_nan(tmp_path):
    """fp32 (the reference) and a rung that did not run have no gradient error nor group."""
    best = _ms_at(0.60)
    summary, text = build(tmp_path, _checked_ladder(best, {"layers.attn.q_proj.weight": 0.015}))
    assert "(nan)" not in text and "nan %" not in text
    table = (tmp_path / "E1" / "table.md").read_text()
    assert "(nan)" not in table
