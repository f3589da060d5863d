"""A5 report: peak-memory tables (fp32 and bf16), the residual-stream size, the largest forward
allocations with the code that made them, the phases of each step, each step's active-memory
timeline, and the writeup's numbers.

    python -m cs336_systems.report.a5 --records r1.json ... --out-dir DIR

Reads the JSON records of ``cs336_systems.memory.snapshot`` (never the snapshot pickles, which stay
out of git) and draws each record's timeline from the bands it keeps into ``DIR/timelines/<record
name>.png``, which the section embeds by that path below DIR.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import pandas as pd

from cs336_systems.models import get_size
from cs336_systems.models import MODES as MODE_ORDER
from cs336_systems.report.a5_timeline import draw, draw_placeholder
from cs336_systems.report.common import load_records, run_provenance, write_summary, write_table
from cs336_systems.report.summary_schemas import BOOL, INT, NUM, PROVENANCE, STR, arr, null, obj, section

MODE_TITLES = {"forward": "forward", "forward-backward": "forward + backward", "train-step": "full train step"}
MIB = 2**20


def _mib(value: int | float | None) -> float | None:
    return None if value is None else value / MIB


def peak_table(records: list[dict], precision: str) -> pd.DataFrame:
    """One row per context, one column per mode: the peak of live tensors (MiB), or the status."""
    chosen = [r for r in records if r["params"]["precision"] == precision]
    contexts = sorted({r["params"]["context"] for r in chosen})
    modes = [m for m in MODE_ORDER if any(r["params"]["mode"] == m for r in chosen)]
    rows = []
    for context in contexts:
        row = {"context": context}
        for mode in modes:
            match = [r for r in chosen if r["params"]["context"] == context and r["params"]["mode"] == mode]
            if not match:
                cell = ""
            elif match[0]["status"] == "ok":
                cell = f"{_mib(match[0]['metrics']['peak']['bytes']):,.1f}"
            else:
                cell = match[0]["status"].upper()
            row[f"{MODE_TITLES[mode]} peak (MiB)"] = cell
        before = [r for r in chosen if r["params"]["context"] == context and r["status"] == "ok"
                  and r["params"]["mode"] == "train-step"]
        if before:
            row["train step: live before it (MiB)"] = f"{_mib(before[0]['metrics']['initial_bytes']):,.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


def residual_activation(records: list[dict]) -> list[dict]:
    """(d): bytes of one fp32 residual-stream activation, batch x context x d_model x 4 bytes."""
    out = {}
    for r in records:
        p = r["params"]
        d_model = get_size(p["size"]).d_model
        size = p["batch"] * p["context"] * d_model * 4
        out[p["context"]] = {"context": p["context"], "batch": p["batch"], "d_model": d_model, "bytes": size,
                             "mib": size / MIB}
    return [out[c] for c in sorted(out)]


def top_allocations(records: list[dict], k: int = 10) -> tuple[pd.DataFrame, dict | None]:
    """(e): the largest allocations of the forward snapshot (fp32, the longest context that ran)."""
    forward = [r for r in records if r["status"] == "ok" and r["params"]["mode"] == "forward"
               and r["params"]["precision"] == "fp32"] or \
              [r for r in records if r["status"] == "ok" and r["params"]["mode"] == "forward"]
    if not forward:
        return pd.DataFrame(), None
    chosen = max(forward, key=lambda r: r["params"]["context"])
    rows = []
    for a in chosen["metrics"]["top_allocations"][:k]:
        rows.append({"size (MiB)": f"{_mib(a['size_bytes']):,.2f}", "count": a["count"],
                     "code (first frame in our packages)": a["frame"] or "(none: no frame of ours)",
                     "op": a["op"] or "", "autograd node": a["node"] or ""})
    return pd.DataFrame(rows), chosen


def phase_rows(records: list[dict]) -> list[dict]:
    """(a): per recorded step, each phase's live memory at start, end and peak (MiB)."""
    out = []
    for r in sorted(records, key=lambda r: (r["params"]["precision"], MODE_ORDER.index(r["params"]["mode"]),
                                            r["params"]["context"])):
        if r["status"] != "ok":
            continue
        m = r["metrics"]
        gpu_ms = m.get("phase_gpu_ms") or {}      # absent on the CPU and in records made before it was measured
        out.append({
            "context": r["params"]["context"], "mode": r["params"]["mode"], "precision": r["params"]["precision"],
            "initial_mib": _mib(m["initial_bytes"]), "peak_mib": _mib(m["peak"]["bytes"]),
            "peak_phase": m["peak"]["phase"],
            "phases": [{"name": p["name"], "start_mib": _mib(p["bytes_at_start"]), "end_mib": _mib(p["bytes_at_end"]),
                        "peak_mib": _mib(p["peak_bytes"]), "host_ms": p["end_ms"] - p["start_ms"],
                        "gpu_ms": gpu_ms.get(p["name"])} for p in m["phases"]],
        })
    return out


def allocator_check(records: list[dict]) -> dict | None:
    """On CUDA: the trace's peak against ``torch.cuda.max_memory_allocated`` over the same step."""
    pairs = [(r["metrics"]["peak"]["bytes"], r["metrics"]["max_allocated_bytes"]) for r in records
             if r["status"] == "ok" and r["metrics"].get("max_allocated_bytes")]
    if not pairs:
        return None
    worst = max(abs(a - b) / b for a, b in pairs)
    reserved = [r["metrics"]["max_reserved_bytes"] - r["metrics"]["max_allocated_bytes"] for r in records
                if r["status"] == "ok" and r["metrics"].get("max_reserved_bytes")]
    return {"points": len(pairs), "max_relative_difference": worst,
            "max_reserved_over_allocated_mib": _mib(max(reserved)) if reserved else None}


def timeline_figures(records: list[dict], stems: list[str], out_dir: Path) -> list[dict]:
    """Draw each record's timeline PNG as ``out_dir/timelines/<stem>.png`` (``stems``: the record
    files' names, in the same order), or a note saying why there is none; return their paths
    relative to ``out_dir`` (what the template embeds)."""
    out = []
    for r, stem in zip(records, stems, strict=True):
        p = r["params"]
        title = (f"A5 active memory: {p['size']}, context {p['context']}, batch {p['batch']}, {p['mode']}, "
                 f"{p['precision']}")
        path = out_dir / "timelines" / f"{stem}.png"
        if r.get("timeline"):
            draw(r["timeline"], path, title + (" (out of memory)" if r["status"] == "oom" else ""),
                 r.get("metrics", {}).get("top_allocations") or [])
        elif "timeline" in r:       # nothing was recorded: the step failed before it began
            why = r.get("message") or r.get("reason") or "no allocation was recorded"
            draw_placeholder(path, title, f"{r['status'].upper()}: {why}")
        else:
            draw_placeholder(path, title, "this record predates stored timelines; re-measure A5 to draw it")
        out.append({"path": os.path.relpath(path, out_dir), "context": p["context"], "mode": p["mode"],
                    "precision": p["precision"], "status": r["status"]})
    out.sort(key=lambda f: (f["precision"] != "fp32", f["precision"], MODE_ORDER.index(f["mode"]), f["context"]))
    return out


def precision_ratios(records: list[dict]) -> list[dict]:
    """(c) against (b): bf16 peak over fp32 peak, per mode and context where both ran."""
    peaks = {(r["params"]["mode"], r["params"]["context"], r["params"]["precision"]): r["metrics"]["peak"]["bytes"]
             for r in records if r["status"] == "ok"}
    out = []
    for (mode, context, precision), fp32 in sorted(peaks.items(), key=lambda kv: (MODE_ORDER.index(kv[0][0]), kv[0][1])):
        bf16 = peaks.get((mode, context, "bf16"))
        if precision == "fp32" and bf16 is not None:
            out.append({"mode": mode, "context": context, "fp32_mib": _mib(fp32), "bf16_mib": _mib(bf16),
                        "ratio": bf16 / fp32})
    return out


def answer(phases: list[dict], ratios: list[dict], top: list[dict]) -> dict | None:
    """What the section opens with, from the rows it tabulates: fp32's peaks over the contexts (the full
    training step, what was live before it, the forward pass), bf16's peak against fp32's at the same
    points, and the largest allocations at the recorded peak."""
    fp32 = [p for p in phases if p["precision"] == "fp32"]
    if not fp32:
        return None
    gib = lambda mib: mib / 1024
    by_mode = {mode: [p for p in fp32 if p["mode"] == mode] for mode in ("forward", "train-step")}
    span = lambda rows, key: [gib(min(r[key] for r in rows)), gib(max(r[key] for r in rows))] if rows else None
    train = by_mode["train-step"]
    return {"contexts": sorted({p["context"] for p in fp32}),
            "train_peak_gib": span(train, "peak_mib"), "forward_peak_gib": span(by_mode["forward"], "peak_mib"),
            "live_before_gib": gib(statistics.median(r["initial_mib"] for r in train)) if train else None,
            "bf16_ratio": [min(r["ratio"] for r in ratios), max(r["ratio"] for r in ratios)] if ratios else None,
            "largest": _largest(top)}


def _largest(top: list[dict]) -> dict | None:
    """The largest size among the top allocations: how many blocks of it, and the operations that made them."""
    if not top:
        return None
    size = max(a["size_bytes"] for a in top)
    same = [a for a in top if a["size_bytes"] == size]
    return {"mib": size / 2**20, "blocks": sum(a["count"] for a in same),
            "made_by": list(dict.fromkeys(a["op"] or a["node"] or a["frame"] or "unknown" for a in same))}


def summarize(records: list[dict], timelines: list[dict], top_record: dict | None) -> dict:
    ok = [r for r in records if r["status"] == "ok"]
    first = records[0]["params"]
    phases = phase_rows(records)
    top = (top_record["metrics"]["top_allocations"] or []) if top_record else []
    summary = {
        "provenance": run_provenance(records),
        "size": first["size"], "d_model": first["d_model"], "num_layers": first["num_layers"],
        "batch": first["batch"], "warmup": first["warmup"], "device": first["device"],
        "contexts": sorted({r["params"]["context"] for r in records}),
        "precisions": [p for p in ("fp32", "bf16") if any(r["params"]["precision"] == p for r in records)],
        "sources": sorted({r["metrics"]["source"] for r in ok}),
        "phase_sources": sorted({r["metrics"]["phase_source"] for r in ok}),
        "snapshots": sorted(r["artifacts"]["snapshot"] for r in records if r.get("artifacts", {}).get("snapshot")),
        "points": len(records), "ok": len(ok),
        "not_ok": [f"context {r['params']['context']} {r['params']['mode']} {r['params']['precision']}: "
                   f"{r['status']}" + (f" ({r['message']})" if r.get("message") else "")
                   for r in records if r["status"] != "ok"],
        "residual": residual_activation(records),
        "phases": phases,
        # some phase was timed on the GPU as well (CUDA events at the same marks)
        "gpu_timed": any(p["gpu_ms"] is not None for row in phases for p in row["phases"]),
        "top_context": top_record["params"]["context"] if top_record else None,
        "top_precision": top_record["params"]["precision"] if top_record else None,
        "top_allocations": top,
        # the largest of them, as the section words it: its size in MiB and whether it recurs
        "largest_allocation": {"size_mib": top[0]["size_bytes"] / 1048576, "several": top[0]["count"] > 1} if top else None,
        "allocator_check": allocator_check(records),
        "bf16_vs_fp32": precision_ratios(records),
        "timelines": timelines,
    }
    return summary | {"answer": answer(summary["phases"], summary["bf16_vs_fp32"] or [], summary["top_allocations"] or [])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.a5", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", required=True, help="A5 records (JSON)")
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        records = load_records(args.records)
        bad = [r["id"] for r in records if r["id"] != "A5"]
        if bad:
            raise ValueError(f"not A5 records: ids {sorted(set(bad))}")
    except (OSError, ValueError, KeyError) as exc:
        p.error(str(exc))
    timelines = timeline_figures(records, [Path(path).stem for path in args.records], args.out_dir)
    for precision in ("fp32", "bf16"):
        write_table(peak_table(records, precision), args.out_dir, f"peak_{precision}")
    top, top_record = top_allocations(records)
    write_table(top, args.out_dir, "top_allocations")
    write_summary(args.out_dir / "summary.json", summarize(records, timelines, top_record))
    print(f"A5 report: {len(records)} records -> {args.out_dir}", file=sys.stderr)
    return 0


# What writeup/templates/sections/A5.md.j2 reads of this report's summary (report.summary_schemas).
SUMMARY_SCHEMAS: dict[str, dict] = {}

_SPAN = null(arr(NUM))
SUMMARY_SCHEMAS["A5"] = section(
    answer=null(obj(bf16_ratio=_SPAN, contexts=arr(INT), forward_peak_gib=_SPAN, live_before_gib=null(NUM),
                    largest=null(obj(blocks=INT, made_by=arr(STR), mib=NUM)), train_peak_gib=_SPAN)),
    allocator_check=null(obj(max_relative_difference=NUM, max_reserved_over_allocated_mib=NUM, points=INT)),
    batch=INT,
    bf16_vs_fp32=null(arr(obj(context=INT, mode=STR, ratio=NUM))),
    contexts=arr(INT),
    d_model=INT,
    device=STR,
    not_ok=null(arr(STR)),
    num_layers=INT,
    ok=INT,
    phase_sources=arr(STR),
    phases=arr(obj(context=INT, initial_mib=NUM, mode=STR, peak_mib=NUM, peak_phase=null(STR),
                   phases=arr(obj(end_mib=NUM, gpu_ms=null(NUM), host_ms=NUM, name=STR, peak_mib=NUM, start_mib=NUM)),
                   precision=STR)),
    points=INT,
    precisions=arr(STR),
    provenance=PROVENANCE,
    residual=arr(obj(batch=INT, context=INT, d_model=INT, mib=NUM)),
    size=STR,
    snapshots=null(arr(STR)),
    sources=null(arr(STR)),
    timelines=arr(obj(context=INT, mode=STR, path=STR, precision=STR, status=STR)),
    top_allocations=null(arr(obj(count=INT, frame=null(STR), node=null(STR), op=null(STR)))),
    largest_allocation=null(obj(several=BOOL, size_mib=NUM)),
    gpu_timed=BOOL,
    top_context=INT,
    top_precision=STR,
    warmup=INT,
)


if __name__ == "__main__":
    sys.exit(main())
