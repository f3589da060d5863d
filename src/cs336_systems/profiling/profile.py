"""A2: profile forward, forward+backward and a training step of one size × context.

    python -m cs336_systems.profiling.profile --size small --context 256 --out rec.json

One process runs the modes one after another (train-step last; an out-of-memory mode is marked
``oom`` and the others still run). Each mode: a fresh model, ``--warmup`` steps with the plain
naive attention inside a "warm-up" range, then ``--steps`` measured steps with the annotated
attention (same math, same kernels) and a range around each phase: "forward", "backward",
"optimizer step", and inside attention "computing attention scores", "computing softmax",
"final matmul". Each phase is also timed in Python (synchronised timer inside the range).

On CUDA with ``--nsys`` found, the command re-runs itself under ``nsys profile`` (ranges are NVTX
ranges in a domain named after the mode), then reads ``nsys stats`` tables per range into ONE
record; the ``.nsys-rep`` stays next to the record. Otherwise (the CPU, or no nsys) the same
record comes from torch.profiler, and says so (``metrics.source``).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch

from cs336_systems.cli import parse_device, require_at_least
from cs336_systems.models import MODEL_SIZES, get_size
from cs336_systems.profiling import nsys as nsys_tools
from cs336_systems.profiling import torch_tables
from cs336_systems.profiling.annotated_attention import annotated_attention
from cs336_systems.profiling.classify import classify
from cs336_systems.profiling.ranges import (ATTENTION_RANGES, MEASURED, MODE_PHASES, PHASE_RANGES, WARMUP,
                                            nvtx_mark, torch_mark)
from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import PhaseTimer, attempt, free_device_memory, summarize, synchronize
from cs336_systems.workload import MODES, build_workload

# Below this share of its Python-timed duration, a phase's kernel table is suspect (see notes).
MIN_COVERAGE = 0.05
# `nsys stats` calls at once: one per phase range tabulated, six a profile of the three modes.
STATS_WORKERS = 8


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.profiling.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", required=True, choices=list(MODEL_SIZES), help="a row of the size table")
    p.add_argument("--context", type=int, required=True, help="context length")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="modes to profile")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2, help="unprofiled steps before the measured ones, per mode")
    p.add_argument("--steps", type=int, default=3, help="measured steps per mode")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--nsys", default="nsys", help='nsys program (name on PATH or path); "" = always torch.profiler')
    p.add_argument("--out", required=True, help="where the JSON record goes")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)   # the run under nsys
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)     # forwarded to the run under nsys
    require_at_least(p, args, 1, "context", "batch", "steps")
    require_at_least(p, args, 0, "warmup")
    if len(set(args.modes)) != len(args.modes):
        p.error("--modes: each mode once")
    parse_device(p, args.device)
    if get_size(args.size).d_model % get_size(args.size).num_heads:
        p.error(f"--size {args.size}: heads do not divide d_model")
    args.modes = [m for m in MODES if m in args.modes]        # train-step last: it needs the most memory
    return args


def profile_mode(args: argparse.Namespace, mode: str, tool: str) -> dict:
    """Warm up, then measure ``args.steps`` steps of ``mode`` with ranges of kind ``tool``
    ("nvtx": NVTX ranges in the domain ``mode``; "torch": record_function under torch.profiler)."""
    device = torch.device(args.device)
    mark = nvtx_mark(mode) if tool == "nvtx" else torch_mark
    workload = build_workload(get_size(args.size), context=args.context, batch=args.batch, mode=mode,
                              attention="naive", device=device)
    with mark(WARMUP):
        for _ in range(args.warmup):
            workload.step()
        # The warm-up's kernels are still queued: without this wait the first measured range would
        # hold the warm-up's tail (seen on an H100: +93 ms in the first of two medium forward ranges).
        synchronize(device)
    from cs336_basics.model import set_attention

    set_attention(workload.model, functools.partial(annotated_attention, mark=mark))
    timer = PhaseTimer(device)

    @contextlib.contextmanager
    def phase(name: str):
        with mark(PHASE_RANGES[name]), timer.phase(name):     # timer inside: the range holds the sync
            yield

    profiler = contextlib.nullcontext()
    if tool == "torch":
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
    with profiler as prof:
        with mark(MEASURED):
            for i in range(args.steps):
                workload.step(phase)
    steps = [sum(s) for s in zip(*timer.samples.values())]
    result = {"python_ms": {**{p: summarize(s) | {"samples": s} for p, s in timer.samples.items()},
                            "step": summarize(steps) | {"samples": steps}}}
    if tool == "torch":
        events = torch_tables.plain_events(prof)
        gpu = device.type == "cuda"
        result["ranges"] = torch_tables.range_totals(events)
        result["tables"] = {r: torch_tables.range_table(events, r, gpu) for r in ranges_to_tabulate(args.modes, mode, "torch")}
    del workload
    return result


def ranges_to_tabulate(modes: list[str], mode: str, tool: str) -> tuple[str, ...]:
    """Each mode's phases; the attention ranges once, in the first mode, and only under
    torch.profiler, which assigns each kernel to the operator that launched it. Under nsys a kernel
    table is a time filter (``--filter-nvtx``): right for a phase range, whose timer synchronises
    inside it, wrong for an attention range, which closes before its kernels run; the attention
    ranges' GPU time comes from ``nvtx_gpu_proj_sum`` instead (work launched inside the range)."""
    attention = ATTENTION_RANGES if mode == modes[0] and tool == "torch" else ()
    return MODE_PHASES[mode] + attention


def run_modes(args: argparse.Namespace, tool: str) -> dict[str, dict]:
    results = {}
    for mode in args.modes:
        log(f"A2 {args.size} ctx {args.context}: {mode}")
        status, metrics, message = attempt(lambda: profile_mode(args, mode, tool))
        results[mode] = {"status": status, "message": message, **metrics}
        gc.collect()
        free_device_memory(args.device)
    return results


def classified(rows: list[dict], range_name: str) -> list[dict]:
    return [r | {"category": classify(r["name"], range_name)} for r in rows]


def add_checks(modes: dict[str, dict]) -> list[str]:
    """Loud notes where a phase's table holds far less kernel time than the phase took."""
    warnings = []
    for mode, m in modes.items():
        m.setdefault("notes", [])
        if m["status"] != "ok":
            continue
        for phase, range_name in PHASE_RANGES.items():
            if range_name not in m["tables"] or phase not in m["python_ms"]:
                continue
            found = sum(r["total_ns"] for r in m["tables"][range_name])
            timed = m["python_ms"][phase]["samples"][0] * 1e6
            if timed > 0 and found < MIN_COVERAGE * timed:
                note = (f"{mode}/{range_name}: the table holds {found / 1e6:.3f} ms of work, "
                        f"{100 * found / timed:.1f} % of the phase's {timed / 1e6:.3f} ms (Python-timed, first step); "
                        "work launched from another thread (autograd's) may not be attributed to this range")
                m["notes"].append(note)
                warnings.append(note)
    return warnings


def with_torch_profiler(args: argparse.Namespace, reason: str) -> dict:
    modes = run_modes(args, "torch")
    for m in modes.values():
        if m["status"] == "ok":
            m["tables"] = {r: classified(rows, r) for r, rows in m["tables"].items()}
    on_gpu = torch.device(args.device).type == "cuda"
    return {"source": "torch.profiler", "fallback_reason": reason,
            "table_unit": "CUDA kernels" if on_gpu else "CPU operators (self time)", "modes": modes}


def nsys_report_paths(record: Path) -> tuple[Path, Path]:
    """The ``-o`` stem nsys is given and the ``.nsys-rep`` it writes, beside the record. Built by
    name, not ``with_suffix``: "2.7B_ctx128" has a "suffix" (".7B_ctx128") of its own."""
    stem = record.parent / record.name.removesuffix(".json")
    return stem, stem.parent / (stem.name + ".nsys-rep")


def with_nsys(args: argparse.Namespace, nsys: str) -> dict:
    out = Path(args.out)
    report_stem, report = nsys_report_paths(out)
    with tempfile.TemporaryDirectory(prefix="a2-child-") as tmp:
        child_out = Path(tmp) / "child.json"
        # This command's own arguments, then the child's: argparse keeps an option's last value, so
        # the child asks for no nsys of its own and writes to child_out; --child runs the modes.
        child = [sys.executable, "-m", "cs336_systems.profiling.profile", *args.argv,
                 "--nsys", "", "--child", "--out", str(child_out)]
        out.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(nsys_tools.profile_command(nsys, report_stem, child))
        trace = report_stem.parent / (report_stem.name + ".qdstrm")
        if child_out.exists() and not report.exists() and trace.exists():
            # nsys collected the trace but its importer could not turn it into a report (on a lent
            # machine: the importer's libraries missing); nsys itself still exits 0
            raise RuntimeError(f"nsys recorded a trace but could not turn it into a report: its importer failed "
                               f"(nsys's output above says why; the raw trace is left at {trace}). Check the "
                               "Nsight Systems install: its QdstrmImporter and the libraries that needs")
        if not child_out.exists() or not report.exists():
            raise RuntimeError(f"nsys profile exited {done.returncode} without a result "
                               f"(child record: {child_out.exists()}, report: {report.exists()})")
        modes = json.loads(child_out.read_text())["modes"]
    sqlite = nsys_tools.export_sqlite(nsys, report)      # every nsys stats call reads this file
    summary = nsys_tools.run_stats(nsys, sqlite, ["nvtx_sum", "nvtx_gpu_proj_sum"])
    ranges = nsys_tools.parse_nvtx_sum(summary["nvtx_sum"])
    projection = nsys_tools.parse_gpu_projection(summary["nvtx_gpu_proj_sum"])
    empty = []
    filters = [nsys_tools.nvtx_filter(range_name, mode) for mode, m in modes.items() if m["status"] == "ok"
               for range_name in ranges_to_tabulate(args.modes, mode, "nvtx")]
    # One `nsys stats` per range, each a process of its own reading the finished export: they run
    # side by side (the profiled steps are over, so nothing they do can touch a measurement).
    with ThreadPoolExecutor(max_workers=max(1, min(STATS_WORKERS, os.cpu_count() or 1))) as pool:
        kernel_sums = dict(zip(filters, pool.map(
            lambda nvtx: nsys_tools.run_stats(nsys, sqlite, ["cuda_gpu_kern_sum"], nvtx=nvtx)["cuda_gpu_kern_sum"],
            filters)))
    for mode, m in modes.items():
        if m["status"] != "ok":
            continue
        m["ranges"] = [r for r in ranges if r["domain"] == mode]
        m["gpu_projection"] = [r for r in projection if r["domain"] == mode]
        m["tables"] = {}
        for range_name in ranges_to_tabulate(args.modes, mode, "nvtx"):
            nvtx = nsys_tools.nvtx_filter(range_name, mode)
            rows = nsys_tools.parse_kernel_sum(kernel_sums[nvtx])
            if not rows:
                empty.append(nvtx)
                log(f"A2 WARNING: --filter-nvtx {nvtx!r} matched no kernels")
            m["tables"][range_name] = classified(rows, range_name)
        if not m["ranges"]:
            empty.append(f"nvtx_sum has no range in domain {mode!r}")
    return {"source": "nsys", "fallback_reason": None, "table_unit": "CUDA kernels",
            "nsys": {"program": nsys, "version": nsys_tools.nsys_version(nsys),
                     "report": report.name},
            "empty_filters": empty, "modes": modes}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        write_json_atomic(args.out, {"modes": run_modes(args, "nvtx")})
        return 0
    size = get_size(args.size)
    params = {"size": args.size, **asdict(size), "context": args.context, "batch": args.batch, "modes": args.modes,
              "warmup": args.warmup, "steps": args.steps, "device": args.device, "nsys": args.nsys,
              "precision": "fp32", "attention": "nvtx ranges around the naive attention"}
    log(f"A2 profile: {params}")
    on_gpu = torch.device(args.device).type == "cuda"
    nsys = nsys_tools.find_nsys(args.nsys) if on_gpu else None
    reason = None if nsys else ("the device is the CPU" if not on_gpu else
                                f"nsys program {args.nsys!r} not found" if args.nsys else "nsys disabled in the config")
    def measure() -> dict:
        metrics = with_nsys(args, nsys) if nsys else with_torch_profiler(args, reason)
        metrics["warnings"] = add_checks(metrics["modes"])
        return metrics

    status, metrics, message = attempt(measure)
    if status == "ok":              # the run finished; the record's status is its modes'
        statuses = {m["status"] for m in metrics["modes"].values()}
        status = "ok" if "ok" in statuses else ("oom" if statuses == {"oom"} else "error")
        message = None if status == "ok" else "; ".join(f"{k}: {m['message']}" for k, m in metrics["modes"].items())
    write_json_atomic(args.out, make_record("A2", params, status, metrics, reason=message))
    log(f"A2 {status} ({metrics.get('source', '-')}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
