"""C1 report: all-reduce time, algorithm and bus bandwidth against size, per backend and world
size; skipped configurations listed with their reason; and, per (backend, world size), the fit
t(bytes) = o + bytes / w that C8's overhead model uses.

    python -m cs336_systems.report.c1 --rows gloo_x2.json nccl_x2.json ... --out-dir DIR
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from cs336_systems.report import contract
from cs336_systems.report.common import rows_report_args, run_provenance, save_figure, write_table
from cs336_systems.report.contract import Summary, Unread
from cs336_systems.report.spread import HOST_SWING, NOT_SETTLED, across_processes

MB = 10**6


def _range(low: float | None, high: float | None) -> str:
    """Fastest–slowest timed call (ms): the spread beside the median."""
    return "" if low is None or high is None else f"{low:.4g}–{high:.4g}"


def frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        p, m = r["params"], r["metrics"]
        rows.append({"backend": p["backend"], "world_size": p["world_size"], "size_mb": p["size_mb"],
                     "status": r["status"], "ms": m.get("ms"), "ms_range": _range(m.get("ms_min"), m.get("ms_max")),
                     "algbw_GBps": m.get("algbw_GBps"),
                     "busbw_GBps": m.get("busbw_GBps"),
                     # the records of one table may come from different machines (a 4-rank point needs a
                     # 4-GPU host): each row says how many GPUs the machine that made it had
                     "host_gpus": r["provenance"].get("gpu_count") or 0,
                     "reason": r.get("reason") or r.get("message") or ""})
    return pd.DataFrame(rows).sort_values(["backend", "world_size", "size_mb"]).reset_index(drop=True)


@dataclass(frozen=True)
class Hosts:
    host_gpus: int
    series: list[str]


def hosts_by_gpus(df: pd.DataFrame) -> list[Hosts]:
    """The rows grouped by how many GPUs the machine that made them had, smallest group first
    (each series named "nccl x4"); the writeup names them when there is more than one group, so a
    skip reason ("this machine has 2") reads as the machine that tried it, not the whole run's."""
    groups: dict[int, list[str]] = {}
    for (b, w), part in df.groupby(["backend", "world_size"]):
        for gpus in sorted(part["host_gpus"].unique()):
            groups.setdefault(int(gpus), []).append(f"{b} with {int(w)} ranks")
    return [Hosts(g, series) for g, series in sorted(groups.items(), key=lambda kv: len(kv[1]))]


@dataclass(frozen=True)
class SlowerSmaller:
    backend: str
    world_size: int
    small_mb: float
    large_mb: float
    small_ms: float
    large_ms: float
    small_range: str
    large_range: str
    within_spread: bool | None


def slower_smaller(records: list[dict]) -> list[SlowerSmaller]:
    """Where a smaller tensor's median all-reduce took longer than the next larger one's.

    ``within_spread`` says whether the two sizes' fastest–slowest ranges overlap: then the order
    of the medians is not settled by the data and the writeup says so instead of explaining it."""
    series: dict[tuple, list] = {}
    for r in records:
        if r["status"] == "ok":
            p = r["params"]
            series.setdefault((p["backend"], p["world_size"]), []).append((p["size_mb"], r["metrics"]))
    found = []
    for (backend, world), points in sorted(series.items()):
        points.sort(key=lambda point: point[0])
        for (small, a), (large, b) in zip(points, points[1:]):
            if a["ms"] > b["ms"]:
                overlap = None
                if None not in (a.get("ms_min"), a.get("ms_max"), b.get("ms_min"), b.get("ms_max")):
                    overlap = a["ms_min"] <= b["ms_max"] and b["ms_min"] <= a["ms_max"]
                found.append(SlowerSmaller(backend, int(world), float(small), float(large), float(a["ms"]),
                                           float(b["ms"]), _range(a.get("ms_min"), a.get("ms_max")),
                                           _range(b.get("ms_min"), b.get("ms_max")), overlap))
    return found


@dataclass(frozen=True)
class Fit:
    o_ms: float
    w_GBps: float | None


def fit_latency_bandwidth(part: pd.DataFrame) -> Fit | None:
    """Least squares of t = o + bytes / w over the sizes measured, in relative error (weights 1/t)
    so the small sizes that carry o are not drowned by the large ones: o in ms, w in GB/s."""
    ok = part[part["status"] == "ok"]
    if len(ok) < 2:
        return None
    # the weighted normal equations in exactly rounded sums (math.fsum), not LAPACK's least squares,
    # whose last bits differ from one machine's BLAS to another's: a rebuild writes the same summary
    xs, ts = [float(x) * MB for x in ok["size_mb"]], [float(t) / 1e3 for t in ok["ms"]]
    ws = [1 / t**2 for t in ts]
    sw, swx, swt = math.fsum(ws), math.fsum(w * x for w, x in zip(ws, xs)), math.fsum(w * t for w, t in zip(ws, ts))
    swxx, swxt = math.fsum(w * x * x for w, x in zip(ws, xs)), math.fsum(w * x * t for w, x, t in zip(ws, xs, ts))
    slope = (sw * swxt - swx * swt) / (sw * swxx - swx**2)
    intercept = (swt - slope * swx) / sw
    return Fit(float(intercept * 1e3), float(1 / slope / 1e9) if slope > 0 else None)


# How algorithm bandwidth moves with the rank count (``AlgbwByRanks.trend``)
FALLS, DOES_NOT_FALL = "falls", "does not fall"


@dataclass(frozen=True)
class AlgbwByRanks:
    backend: str
    world_sizes: list[int]
    algbw_GBps: list[float]
    # FALLS, DOES_NOT_FALL or NOT_SETTLED (``algbw_by_ranks``)
    trend: str
    host_swing: float


def algbw_by_ranks(largest: pd.DataFrame) -> list[AlgbwByRanks]:
    """Per back end, algorithm bandwidth at the largest size against the rank count, and whether it
    falls at every step (what the ring's 2(n − 1)/n traffic predicts) — checked, not assumed. Each
    rank count is a process group of its own, and two processes of one command differ by up to
    ``HOST_SWING``, which no pair of single processes can measure: a step falls only where the
    bandwidth drops by more than that, and one rising by more than that shows the bandwidth does not
    fall at every step; anything between leaves the trend not settled."""
    out = []
    for backend, part in largest.sort_values("world_size").groupby("backend"):
        if len(part) < 2:
            continue
        bw = part["algbw_GBps"].tolist()
        steps = list(pairwise(bw))
        moves = [across_processes(a, b) for a, b in steps]
        trend = FALLS if all(m == "higher" for m in moves) else DOES_NOT_FALL if "lower" in moves else NOT_SETTLED
        out.append(AlgbwByRanks(backend, [int(w) for w in part["world_size"]], [float(b) for b in bw],
                                trend, HOST_SWING))
    return out


@dataclass(frozen=True)
class AcrossNodes:
    backend: str
    world_size: int
    nodes: int
    hosts: list[str]
    ranks_per_node: int | None


def across_nodes(records: list[dict]) -> list[AcrossNodes]:
    """The rows whose ranks ran on more than one node (their records' ``metrics.launch``): the back
    end, world size, nodes, hosts and ranks a node. Their links between nodes are the network's, not
    the host's: the section says so beside the table."""
    rows = {}
    for r in records:
        launch = (r.get("metrics") or {}).get("launch") or {}
        if r.get("status") == "ok" and (launch.get("nodes") or 1) > 1:
            p = r["params"]
            rows[(p["backend"], int(p["world_size"]))] = AcrossNodes(
                p["backend"], int(p["world_size"]), int(launch["nodes"]), list(launch.get("hosts") or []),
                launch.get("ranks_per_node"))
    return [rows[k] for k in sorted(rows)]


# Where a series' calls are bound by their fixed cost (``LatencyBound.kind``)
UP_TO, NONE, EVERY = "up to", "none", "every"


@dataclass(frozen=True)
class LatencyBound:
    backend: str
    # UP_TO: the sizes up to ``largest_mb`` are latency-bound; NONE: not even the smallest size
    # (``smallest_mb``); EVERY: every size measured (or the time did not grow with the bytes)
    kind: str
    largest_mb: float | None
    smallest_mb: float
    # the bytes' time by the fit (ms) at ``largest_mb`` (UP_TO) or at ``smallest_mb`` (NONE); None for EVERY
    bytes_ms: float | None


def latency_bound(fit: Fit, sizes_mb: list[float], backend: str) -> LatencyBound:
    """Which of a series' measured sizes are latency-bound by its fit t = o + bytes / w: those whose
    fixed cost o is at least the bytes' time bytes / w, so that o is at least half of the call. The
    bytes' time grows with the size, so they are the sizes up to o·w: a prefix of the sizes, possibly
    none (Gloo pays so little per call beside its bandwidth that a 1 MB call is mostly bytes), or
    all of them (also where the time did not grow with the size, ``w`` None)."""
    sizes = sorted(sizes_mb)
    bytes_ms = (lambda mb: mb * MB / (fit.w_GBps * 1e9) * 1e3) if fit.w_GBps else (lambda mb: 0.0)
    bound = [mb for mb in sizes if fit.o_ms >= bytes_ms(mb)]
    if len(bound) == len(sizes):
        return LatencyBound(backend, EVERY, sizes[-1], sizes[0], None)
    if not bound:
        return LatencyBound(backend, NONE, None, sizes[0], bytes_ms(sizes[0]))
    return LatencyBound(backend, UP_TO, bound[-1], sizes[0], bytes_ms(bound[-1]))


@dataclass(frozen=True)
class BackendAt:
    ms: float
    busbw_GBps: float
    o_ms: float | None


@dataclass(frozen=True)
class Headline:
    world_size: int
    size_mb: float
    gloo_over_nccl: float
    # Each back end ran in its own process: the ratio is a verdict only beyond the most two processes
    # of one command differ by (spread.HOST_SWING), which no pair of single processes can measure.
    host_swing: float
    beyond_processes: bool
    gloo: BackendAt
    nccl: BackendAt
    # NCCL's and Gloo's calls at this world size: which sizes their fixed cost binds
    latency: list[LatencyBound]


def headline(largest: pd.DataFrame, fits: dict[str, Fit], sizes: dict[str, list[float]]) -> Headline | None:
    """The section's opening: at the largest size and the fewest ranks both back ends ran, each
    one's time and bus bandwidth, Gloo's time over NCCL's, and each one's fitted per-call cost;
    None where the two back ends share no world size."""
    ok = largest.dropna(subset=["ms"])
    shared = sorted(set(ok.loc[ok["backend"] == "nccl", "world_size"]) & set(ok.loc[ok["backend"] == "gloo", "world_size"]))
    if not shared:
        return None
    world = int(shared[0])
    rows = {r.backend: r for r in ok[ok["world_size"] == world].itertuples()}
    at = {backend: BackendAt(float(r.ms), float(r.busbw_GBps), fit.o_ms if (fit := fits.get(f"{backend}_x{world}")) else None)
          for backend, r in rows.items()}
    ratio = float(rows["gloo"].ms / rows["nccl"].ms)
    latency = [latency_bound(fits[key], sizes[key], backend) for backend in ("nccl", "gloo")
               if (key := f"{backend}_x{world}") in fits]
    return Headline(world, float(rows["nccl"].size_mb), ratio, HOST_SWING, across_processes(ratio, 1.0) != NOT_SETTLED,
                    at["gloo"], at["nccl"], latency)


@dataclass(frozen=True)
class FitRow:
    backend: str
    world_size: int
    o_ms: float
    w_GBps: float | None
    largest_ms: float | None
    largest_busbw_GBps: float | None
    # the size whose bytes take as long as o (o·w, MB): calls below it are latency-bound, above it
    # bandwidth-bound; None where the time did not grow with the size
    crossover_mb: float | None


def fit_table(fits: dict[str, Fit], largest: pd.DataFrame) -> list[FitRow]:
    """One row per (back end, world size) with a fit: o, w, the size at which the bytes take o, and
    the time and bus bandwidth at the largest size, for the section's table."""
    at = {f"{r.backend}_x{int(r.world_size)}": r for r in largest.itertuples()}
    out = []
    for key, fit in fits.items():
        backend, _, world = key.partition("_x")
        row = at.get(key)
        out.append(FitRow(backend, int(world), fit.o_ms, fit.w_GBps, float(row.ms) if row is not None else None,
                          float(row.busbw_GBps) if row is not None else None,
                          fit.o_ms * fit.w_GBps if fit.w_GBps else None))
    return out


@dataclass(frozen=True)
class Skipped:
    backend: str
    world_size: int
    reason: str


@dataclass(frozen=True)
class C1Summary(Summary):
    # C8's overhead model and C12's transfer bound read these, by "<backend>_x<world size>"
    fits: Unread[dict[str, Fit]]
    skipped: list[Skipped]
    sizes_mb: list[float]
    hosts: list[Hosts]
    several_hosts: bool
    across_nodes: list[AcrossNodes]
    slower_smaller: list[SlowerSmaller]
    algbw_by_ranks: list[AlgbwByRanks]
    headline: Headline | None
    fit_table: list[FitRow]


CONTRACTS = {"C1": C1Summary}


def plot(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for (backend, world), part in df[df["status"] == "ok"].groupby(["backend", "world_size"]):
        style = "-" if backend == "nccl" else "--"
        for ax, col in zip(axes, ("ms", "algbw_GBps", "busbw_GBps")):
            ax.plot(part["size_mb"], part[col], style, marker="o", label=f"{backend}, {world} ranks")
    for ax, label in zip(axes, ("time per all-reduce (ms)", "algorithm bandwidth (GB/s)", "bus bandwidth (GB/s)")):
        ax.set(xscale="log", yscale="log", xlabel="tensor size (MB)", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None) -> int:
    records, out_dir = rows_report_args("cs336_systems.report.c1", __doc__, argv)
    df = frame(records)
    write_table(df.round(4), out_dir)
    plot(df, out_dir / "allreduce.png")
    fits = {f"{b}_x{w}": fit for (b, w), part in df.groupby(["backend", "world_size"])
            if (fit := fit_latency_bandwidth(part)) is not None}
    sizes = {f"{b}_x{w}": [float(x) for x in part.loc[part["status"] == "ok", "size_mb"]]
             for (b, w), part in df.groupby(["backend", "world_size"])}
    ok = df[df["status"] == "ok"]
    largest = ok[ok["size_mb"] == ok["size_mb"].max()] if len(ok) else ok
    hosts = hosts_by_gpus(df)
    contract.write(out_dir / "summary.json", C1Summary(
        provenance=run_provenance(records), fits=fits,
        skipped=[Skipped(b, int(w), part["reason"].iloc[0])
                 for (b, w), part in df[df["status"] == "skipped"].groupby(["backend", "world_size"])],
        sizes_mb=sorted(float(s) for s in df["size_mb"].unique()), hosts=hosts, several_hosts=len(hosts) > 1,
        across_nodes=across_nodes(records), slower_smaller=slower_smaller(records),
        algbw_by_ranks=algbw_by_ranks(largest), headline=headline(largest, fits, sizes), fit_table=fit_table(fits, largest)))
    print(f"C1 report: {len(df)} rows -> {out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
