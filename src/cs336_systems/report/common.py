"""What every report step shares: reading records, provenance of a run, saving outputs."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

import matplotlib

matplotlib.use("Agg")   # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

from cs336_systems.records import DamagedRecord, read_record, read_record_list  # noqa: E402
from cs336_systems.report.contract import Provenance, Sitting  # noqa: E402


def save_figure(fig: plt.Figure, path: Path) -> None:
    """Write ``fig`` as a PNG at ``path`` (no software stamp, so the same figure gives the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def _read_or_stop(read, path):
    """``read(path)``; a damaged record stops the report with one line naming it. It is left where it
    is: other reports may read it too, and the next run sets it aside before it plans anything
    (``pipeline.run_folder``), so the point is measured again once and every reader sees the new record."""
    try:
        return read(path)
    except DamagedRecord as error:
        raise SystemExit(f"damaged record {error.path}: {error.why}. The next run sets it aside and "
                         "measures it again.") from None


def load_records(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    return [_read_or_stop(read_record, p) for p in paths]


def load_record_lists(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """The records of several files that each hold a JSON list of them, in order."""
    return [record for p in paths for record in _read_or_stop(read_record_list, p)]


# Records further apart than this were measured in separate sittings: a lent machine is held at most
# 30 minutes, so on lent machines two sittings may be two machines (their host names all read "vm").
# writeup/templates/sections/_run.md.j2 words it ("half an hour").
SITTING_GAP_S = 30 * 60


def sittings(times: Iterable[str]) -> list[dict[str, str]]:
    """The stretches of ``times`` (ISO 8601, UTC) with no gap over SITTING_GAP_S: ``[{from, to}]``."""
    from datetime import datetime

    out: list[dict[str, str]] = []
    last = None
    for t in sorted(times):
        now = datetime.fromisoformat(t)
        if last is None or (now - last).total_seconds() > SITTING_GAP_S:
            out.append({"from": t, "to": t})
        else:
            out[-1]["to"] = t
        last = now
    for s in out:       # "2026-11-27 11:35–12:01", or one time where the sitting's records share a minute
        start, end = s["from"][:16].replace("T", " "), s["to"][11:16]
        s["label"] = start if start.endswith(end) else f"{start}–{end}"
    return out


def run_provenance(records: list[dict[str, Any]]) -> Provenance:
    """Which machines, commits and dates a set of records came from (for "this section's run"), and
    the sittings they were measured in where there were several (``sittings``)."""
    prov = [r["provenance"] for r in records]
    times = sorted(p["utc"] for p in prov)
    apart = sittings(times)
    days = sorted({t[:10] for t in times})
    return Provenance(
        dates=" to ".join(dict.fromkeys([days[0], days[-1]])) if days else "no date",
        sittings=[Sitting(label=s["label"], from_=s["from"], to=s["to"]) for s in apart] if len(apart) > 1 else [],
        gpus=sorted({p.get("gpu") or "CPU only" for p in prov}),
        gpu_counts=sorted({p.get("gpu_count") or 0 for p in prov}),
        hosts=sorted({p["host"] for p in prov}),
        commits=sorted({p["commit"][:10] for p in prov}),
        dirty=any(p.get("dirty") for p in prov),
        torch=sorted({p["torch"] for p in prov}),
        records=len(records),
        statuses={s: sum(r["status"] == s for r in records) for s in ("ok", "oom", "skipped", "error")},
    )


def rows_report_args(module: str, doc: str, argv=None, rows_help: str = "JSON lists of records"):
    """The command line every row-list report shares: ``--rows FILE... --out-dir DIR``. Returns the
    records and the output folder; a missing or malformed file stops with one line, not a traceback."""
    import argparse

    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", required=True, help=rows_help)
    p.add_argument("--out-dir", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        return load_record_lists(args.rows), args.out_dir
    except (OSError, ValueError) as exc:
        p.error(str(exc))


def cell(value: float | None, fmt: str = ".2f") -> str:
    """A number as a table cell written by hand (``format(value, fmt)``), empty where there is none
    (None or NaN: a point that did not run)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def write_table(df: pd.DataFrame, out_dir: Path, stem: str = "table") -> None:
    """The same table as CSV (for code) and Markdown (for people)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_dir / f"{stem}.csv", index=False)
    (out_dir / f"{stem}.md").write_text(df.to_markdown(index=False) + "\n")
