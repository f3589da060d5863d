"""B3 / B4 report, from the one checks record ``attention.check`` writes: B3, the error tables of our
FlashAttention Functions against float64; B4, the two backward paths timed side by side, with what
each computes and moves (``backward_accounting``). Both say what the Triton kernels ran
(``report.what_ran``). Each run of it writes one deliverable's folder.

    python -m cs336_systems.report.flash_checks B3 --records results/RUN/B3/records/checks.json --out-dir DIR
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from cs336_systems.accounting.hardware import BY_DEVICE_NAME
from cs336_systems.attention.flash_record import ran
from cs336_systems.attention.tuned_tiles import TUNED
from cs336_systems.profiling.mfu import FP32_MATMUL, attention_peak
from cs336_systems.report import contract
from cs336_systems.report.common import load_record_lists, run_provenance, write_table
from cs336_systems.report.contract import Summary
from cs336_systems.report.spread import across_processes
from cs336_systems.report.what_ran import PEAK_WORDS, WhatRan, peak_words, tuned_elsewhere, what_ran

QUANTITIES = ("o", "lse", "dq", "dk", "dv")


def error_table(records: list[dict]) -> pd.DataFrame:
    """One row per (function, dtype, causal): our error and plain attention's, per quantity."""
    rows = []
    for r in records:
        p = r["params"]
        rows.append({"function": p["function"], "dtype": p["dtype"], "causal": p["causal"],
                     "status": r["status"],
                     **{f"{key}_{who}": r["metrics"][who][key] if r["status"] == "ok" else None
                        for key in QUANTITIES for who in ("ours", "plain")}})
    return pd.DataFrame(rows, columns=["function", "dtype", "causal", "status",
                                       *(f"{key}_{who}" for key in QUANTITIES for who in ("ours", "plain"))])


# Our error within this factor of plain attention's in the same dtype is the dtype's own rounding:
# the tiling and the online softmax add nothing that the order of a sum does not.
SAME_ORDER = 3.0
# The line is drawn against plain attention's error, which moves between cards (its kernels sum in
# another order): a ratio within this factor of the line either way is called "near" it, not
# decided (one commit read 3.31x on an H200 and under 3x on an H100).
NEAR = 1.5


def error_verdict(ratio: float) -> str:
    """"within" SAME_ORDER (clear of the line by NEAR), "beyond" it (likewise), or "near" it."""
    if ratio <= SAME_ORDER / NEAR:
        return "within"
    return "beyond" if ratio >= SAME_ORDER * NEAR else "near"


@dataclass(frozen=True)
class WorstError:
    ratio: float
    function: str
    causal: bool
    quantity: str
    ours: float
    plain: float
    verdict: str


def worst_ratio(errors: pd.DataFrame) -> dict[str, WorstError]:
    """Per dtype: the largest ours ÷ plain error ratio over functions, causal settings and quantities
    (how far from what plain attention in that dtype achieves our worst case is), and its verdict
    against SAME_ORDER (``error_verdict``)."""
    out = {}
    for dtype, part in errors[errors["status"] == "ok"].groupby("dtype"):
        ratio, row, key = max(((row[f"{key}_ours"] / max(row[f"{key}_plain"], 1e-30), row, key)
                               for _, row in part.iterrows() for key in QUANTITIES), key=lambda t: t[0])
        out[dtype] = WorstError(float(ratio), row["function"], bool(row["causal"]), key,
                                float(row[f"{key}_ours"]), float(row[f"{key}_plain"]), error_verdict(ratio))
    return out


def lse_better(errors: pd.DataFrame) -> list[str]:
    """The 16-bit dtypes in which our L is closer to float64's than plain attention's in every row."""
    ok = errors[(errors["status"] == "ok") & (errors["dtype"] != "fp32")]
    return [dtype for dtype, part in ok.groupby("dtype") if (part["lse_ours"] < part["lse_plain"]).all()]


def ragged(records: list[dict]) -> bool | None:
    """Whether the error checks' lengths are a multiple of no tile their Triton kernels ran with
    (``flash_record.ran``; the PyTorch Function's too), so that every kernel's boundary masks ran;
    None where no record says its tiles."""
    sizes, lengths = set(), set()
    for r in records:
        tiles = ran(r)["facts"].get("tiles") if r["params"]["function"] != "pytorch" else None
        tiles = tiles or (r["metrics"].get("launch") or {}).get("tiles")
        if not tiles:
            continue
        sizes.update(size for t in tiles.values() if t for size in (t["block_q"], t["block_k"]))
        lengths.add(r["params"]["shape"][1])
    return all(n % size for n in lengths for size in sizes) if sizes else None


def time_table(records: list[dict]) -> pd.DataFrame:
    rows = [{"function": r["params"]["function"], "dtype": r["params"]["dtype"],
             "shape": "×".join(map(str, r["params"]["shape"])), "status": r["status"],
             "forward_ms": r["metrics"].get("forward_ms"), "backward_ms": r["metrics"].get("backward_ms")}
            for r in records]
    return pd.DataFrame(rows)


# Products of N x N x d (or N x d x N) per backward: the Triton dK/dV and dQ kernels each recompute S
# and dP (seven); the fused backward computes them once (five), as does the PyTorch backward.
TRITON_PRODUCTS = {"dkdv+dq": 7, "fused": 5}
PYTORCH_PRODUCTS = 5
# N x N fp32 matrices the compiled PyTorch backward passes between its matmuls (S, P, dP, dS): each
# written once and read at least once, whatever the compiler fuses around the library matmuls.
PYTORCH_MATRIX_PASSES = 8


@dataclass(frozen=True)
class BackwardCost:
    """What one dtype's two timed backwards compute and move, against their times (``backward_accounting``)."""
    triton_ms: float
    pytorch_ms: float
    triton_products: int | None
    pytorch_products: int
    triton_flops: int | None
    pytorch_flops: int
    pytorch_precision: str | None
    triton_mode: str | None
    triton_tflops: float | None
    pytorch_tflops: float
    triton_peak: str | None
    triton_of_peak: float | None
    pytorch_peak: str | None
    pytorch_of_peak: float | None
    pytorch_matrix_bytes: int | None
    pytorch_flops_floor_ms: float | None
    pytorch_bytes_floor_ms: float | None
    pytorch_floor_ms: float | None
    faster_than_floor: bool
    # ours faster: under the PyTorch backward's floor, or the PyTorch backward's median beyond
    # spread.HOST_SWING times ours (one median a side, nothing pairs them)
    faster: bool
    flops_ratio: float | None
    rate_ratio: float | None
    slower_by_rate: bool
    # the answer's ratio of the two times: the PyTorch backward's ÷ ours where ours is ``faster`` (so
    # many times faster), else ours ÷ the PyTorch one's (one median a side: not settled)
    quoted_ratio: float


def backward_accounting(records: list[dict]) -> dict[str, BackwardCost]:
    """Per dtype where both backwards were timed, what each computes and moves (``backward_cost``)."""
    ok = {(r["params"]["dtype"], r["params"]["function"]): r for r in records
          if r["params"].get("kind") == "time" and r["status"] == "ok"}
    return {dtype: backward_cost(ok[(dtype, "triton")], ok[(dtype, "triton-pytorch-backward")])
            for dtype in sorted({dtype for dtype, _ in ok})
            if (dtype, "triton") in ok and (dtype, "triton-pytorch-backward") in ok}


def backward_cost(tri: dict, pyt: dict) -> BackwardCost:
    """What the Triton backward (record ``tri``) and the compiled PyTorch one (``pyt``) timed at B4's
    shape compute and move, against their times and the card's datasheet rates
    (``accounting.hardware``), as far as ``flash_record.ran`` says what ran: FLOPs (the Triton kernels
    over the causal half of the tiles, the compiled PyTorch backward over whole N x N matrices), each
    one's achieved rate and share of the peak of the units its products ran on, and the PyTorch
    backward's floor: the longer of its matmuls at that peak and its N x N intermediates at the memory
    bandwidth. Not their sum: the matmuls themselves write S and dP and read P and dS, and a kernel's
    loads and stores overlap its arithmetic, so only the longer of the two bounds every run.
    ``faster_than_floor``: the Triton backward took less than the PyTorch one's floor, so the work it
    skips explains its lead; ``faster``: that, or the PyTorch backward's median beyond
    ``spread.HOST_SWING`` times ours (``spread.across_processes``: one median a side, timed one after
    the other, which nothing pairs); ``slower_by_rate``: the Triton backward did fewer FLOPs yet took longer,
    at a lower rate."""
    dtype, (batch, n, d) = tri["params"]["dtype"], tri["params"]["shape"]
    gpu = (tri.get("provenance") or {}).get("gpu")
    card = BY_DEVICE_NAME.get(gpu or "")
    facts_t, facts_p = ran(tri)["facts"], ran(pyt)["facts"]
    triton_ms, pytorch_ms = tri["metrics"]["backward_ms"], pyt["metrics"]["backward_ms"]
    products = TRITON_PRODUCTS.get(facts_t.get("backward"))
    triton_flops = products * batch * n * n * d if products else None
    pytorch_flops = PYTORCH_PRODUCTS * 2 * batch * n * n * d
    triton_tflops = triton_flops / triton_ms / 1e9 if triton_flops else None
    pytorch_tflops = pytorch_flops / pytorch_ms / 1e9
    mode = facts_t.get("products")
    top = attention_peak(gpu, "ours", dtype, mode) if mode or dtype != "fp32" else None
    known = top is not None and triton_tflops is not None
    # the PyTorch backward's fp32 matmuls run in what its float32 matmul precision says (profiling.mfu)
    precision, fp32 = facts_p.get("float32_matmul_precision"), facts_p.get("backward_arithmetic") == "fp32"
    unit = FP32_MATMUL.get(precision) if fp32 else None
    flops_peak = getattr(card, f"{unit}_flops") if card is not None and unit else None
    matrix_bytes = PYTORCH_MATRIX_PASSES * batch * n * n * 4 if fp32 else None
    flops_floor = pytorch_flops / flops_peak * 1e3 if flops_peak else None
    bytes_floor = (matrix_bytes / card.hbm_bandwidth * 1e3
                   if matrix_bytes and card is not None and card.hbm_bandwidth else None)
    floors = [f for f in (flops_floor, bytes_floor) if f is not None]
    floor = max(floors) if floors else None
    under = floor is not None and triton_ms < floor
    faster = under or across_processes(pytorch_ms, triton_ms) == "higher"
    return BackwardCost(
        triton_ms=triton_ms, pytorch_ms=pytorch_ms, triton_products=products, pytorch_products=PYTORCH_PRODUCTS,
        triton_flops=triton_flops, pytorch_flops=pytorch_flops, pytorch_precision=precision,
        triton_mode=mode if dtype == "fp32" else None, triton_tflops=triton_tflops, pytorch_tflops=pytorch_tflops,
        triton_peak=peak_words(top) if known else None,
        triton_of_peak=triton_tflops * 1e12 / top.flops if known else None,
        pytorch_peak=PEAK_WORDS.get(unit), pytorch_of_peak=pytorch_tflops * 1e12 / flops_peak if flops_peak else None,
        pytorch_matrix_bytes=matrix_bytes, pytorch_flops_floor_ms=flops_floor, pytorch_bytes_floor_ms=bytes_floor,
        pytorch_floor_ms=floor, faster_than_floor=under, faster=faster,
        # ours against the PyTorch backward: its FLOPs and its rate, each as a ratio
        flops_ratio=triton_flops / pytorch_flops if triton_flops else None,
        rate_ratio=triton_tflops / pytorch_tflops if triton_tflops else None,
        slower_by_rate=bool(triton_flops and triton_ms > pytorch_ms and triton_flops < pytorch_flops
                            and triton_tflops < pytorch_tflops),
        quoted_ratio=pytorch_ms / triton_ms if faster else triton_ms / pytorch_ms)


@dataclass(frozen=True)
class TunerChoice:
    key: str
    gpu: str
    shape: list[int]
    causal: bool | None
    chosen: str
    fused_ms: float | None
    dkdv_ms: float
    dq_ms: float
    separate_ms: float
    fused_over_separate: float | None


def tuner_choices(tuned: dict = TUNED) -> list[TunerChoice]:
    """What the tuner measured and committed in ``attention/tuned_tiles.py`` per (dtype, head dim): the
    best dK/dV and the best dQ launch on its GPU and shape, and, for entries tuned while a fused
    backward (dQ added atomically inside the dK/dV pass) was still a candidate, that fused launch
    too. The fused path lost every such measurement and is gone from the kernels; an entry tuned
    since has no fused time (None), and the backward that runs is dK/dV then dQ."""
    out = []
    for key, entry in sorted(tuned.items()):
        m = entry["measured"]
        separate = m["ms"]["dkdv"] + m["ms"]["dq"]
        fused = m["ms"].get("fused")
        out.append(TunerChoice(key, m["gpu"], m["shape"], m["causal"], m.get("backward", "dkdv+dq"), fused,
                               m["ms"]["dkdv"], m["ms"]["dq"], separate, None if fused is None else fused / separate))
    return out


@dataclass(frozen=True)
class B3Summary(Summary):
    shape: list[int] | None
    worst_ratio: dict[str, WorstError]
    same_order: float
    near_factor: float
    ragged: bool | None
    lse_better: list[str]
    ran: WhatRan


@dataclass(frozen=True)
class B4Summary(Summary):
    shape: list[int] | None
    on_cpu: bool                        # Triton's CPU interpreter: nothing here says anything about speed
    accounting: dict[str, BackwardCost]
    # the dtypes whose Triton backward took less than the PyTorch backward's floor, with that floor (ms)
    under_floor: dict[str, float]
    tuner: list[TunerChoice]
    tuned_elsewhere: list[str]
    ran: WhatRan
    # the section points at B3's table instead of repeating it where the timed calls ran the same as the
    # checked ones
    ran_as_b3: bool


CONTRACTS = {"B3": B3Summary, "B4": B4Summary}


def by_function(record: dict) -> tuple:
    return record["params"]["function"], record["params"]["dtype"]


def same_table(ran: WhatRan, other: WhatRan) -> bool:
    """Whether two ``what_ran`` summaries tabulate the same: the same facts, values and sources
    (whether the records say them), tiles and differences from the tree, whatever the number of
    records behind each and the lengths they ran at (B3 checks at one length, B4 times at another,
    with the same tiles)."""
    def shown(r: WhatRan) -> tuple:
        return ([(f.fact, f.label, f.values, f.source) for f in r.facts],
                [dataclasses.replace(t, seqs="") for t in r.tiles], r.tiles_vary_with_length, r.tree)
    return shown(ran) == shown(other)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.flash_checks", description=__doc__.split("\n\n")[0])
    p.add_argument("deliverable", choices=["B3", "B4"])
    p.add_argument("--records", required=True, help="the JSON list written by cs336_systems.attention.check")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    records = load_record_lists([args.records])
    if not records:
        p.error(f"{args.records}: no records")
    errors_records = [r for r in records if r["params"]["kind"] == "error"]
    time_records = [r for r in records if r["params"]["kind"] == "time"]
    errors, times = error_table(errors_records), time_table(time_records)
    triton = [r for r in records if r["params"]["function"] != "pytorch"]

    def ran_in(kind: str) -> dict:
        """What our kernels ran in the records of ``kind``: the checked calls (error) or the timed ones."""
        return what_ran([r for r in triton if r["params"]["kind"] == kind], key=by_function)

    if args.deliverable == "B3":
        write_table(errors, args.out_dir)
        shape = errors_records[0]["params"]["shape"] if errors_records else None
        contract.write(args.out_dir / "summary.json", B3Summary(
            provenance=run_provenance(errors_records), shape=shape, worst_ratio=worst_ratio(errors),
            same_order=SAME_ORDER, near_factor=NEAR, ragged=ragged(errors_records), lse_better=lse_better(errors),
            ran=ran_in("error")))
    else:
        write_table(times, args.out_dir)
        ran, accounting, provenance = ran_in("time"), backward_accounting(records), run_provenance(records)
        contract.write(args.out_dir / "summary.json", B4Summary(
            provenance=provenance, shape=time_records[0]["params"]["shape"] if time_records else None,
            on_cpu="CPU only" in provenance.gpus, accounting=accounting,
            under_floor={dtype: a.pytorch_floor_ms for dtype, a in accounting.items() if a.faster_than_floor},
            tuner=tuner_choices(),
            tuned_elsewhere=tuned_elsewhere(triton), ran=ran, ran_as_b3=same_table(ran, ran_in("error"))))
    print(f"{args.deliverable} report: {len(errors)} error rows, {len(times)} timing rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
