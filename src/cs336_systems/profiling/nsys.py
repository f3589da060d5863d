"""Nsight Systems from Python: the profile command, ``nsys stats`` per NVTX range, and its CSVs.

What was checked on an H100 with nsys 2025.3.1 (tests/profiling/data/ holds the CSVs):

- ``nsys stats --report cuda_gpu_kern_sum --format csv --filter-nvtx NAME@DOMAIN`` keeps the
  kernels that run during the *first* instance of range NAME in DOMAIN (one forward pass, one
  softmax call), so each filtered table describes one instance; the filter is a time window, so
  kernels that autograd's own thread launches inside a "backward" range count too;
- the domain must be given when the range has one (``forward`` alone matches nothing when only
  ``forward@train-step`` exists), and a nested path (``outer/inner``) matches nothing;
- ``nvtx_sum`` names a range ``domain:name`` (``:forward`` in the default domain);
- a second ``nsys stats`` on the same ``.nsys-rep`` may refuse to run ("existing SQLite export ...
  older than input file"), so the report is exported to SQLite once (``export_sqlite``) and every
  ``nsys stats`` reads that file.

If a filter matches nothing the table is empty and the record says so (``empty_filters``) instead
of reporting zeros.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd

_UNITS_NS = {"ns": 1, "us": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9}


def find_nsys(program: str) -> str | None:
    """The nsys executable: ``program`` on PATH or as a path; None when absent or ``""``."""
    if not program:
        return None
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program)


def nsys_version(nsys: str) -> str | None:
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\d+\.\d+[\.\d-]*", out)
    return match.group(0) if match else out.strip() or None


def profile_command(nsys: str, report_stem: str | os.PathLike, child: list[str]) -> list[str]:
    """Run ``child`` under nsys, tracing CUDA and NVTX only (no CPU sampling: smaller, faster)."""
    return [nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
            "-o", str(report_stem), *child]


def export_sqlite(nsys: str, report_file: str | os.PathLike, timeout: float = 900) -> Path:
    """Export ``X.nsys-rep`` to ``X.sqlite`` once (overwriting), for the ``nsys stats`` calls."""
    report_file = Path(report_file)
    sqlite = report_file.parent / (report_file.name.removesuffix(".nsys-rep") + ".sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite), str(report_file)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not sqlite.exists():
        raise RuntimeError(f"nsys export failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return sqlite


def nvtx_filter(range_name: str, domain: str | None) -> str:
    """The ``--filter-nvtx`` argument for the first instance of ``range_name`` in ``domain``."""
    return f"{range_name}@{domain}" if domain else range_name


def run_stats(nsys: str, report_file: str | os.PathLike, reports: list[str],
              nvtx: str | None = None, timeout: float = 600) -> dict[str, pd.DataFrame]:
    """``nsys stats --format csv`` for ``reports`` (optionally filtered); one DataFrame per report,
    empty when the report (or the filter) matched nothing."""
    with tempfile.TemporaryDirectory(prefix="nsys-stats-") as tmp:
        cmd = [nsys, "stats", "--report", ",".join(reports), "--format", "csv", "--force-overwrite=true",
               "--output", str(Path(tmp) / "s")]
        if nvtx:
            cmd += ["--filter-nvtx", nvtx]
        done = subprocess.run([*cmd, str(report_file)], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"nsys stats failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
        files = sorted(Path(tmp).glob("*.csv"))
        return {report: read_stats_csv(next((f for f in files if f"_{report}" in f.name), None)) for report in reports}


def read_stats_csv(path: str | os.PathLike | None) -> pd.DataFrame:
    """An ``nsys stats`` CSV; an empty frame for a missing or empty file (a filter matched nothing)."""
    if path is None or not Path(path).exists() or Path(path).stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path)


def _ns(df: pd.DataFrame, prefix: str) -> pd.Series:
    """Column ``prefix (unit)`` converted to nanoseconds, whatever ``--timeunit`` was."""
    for column in df.columns:
        match = re.fullmatch(re.escape(prefix) + r"\s*\((\w+)\)", column)
        if match:
            return df[column].astype(float) * _UNITS_NS[match.group(1)]
    raise ValueError(f"no column {prefix!r} (with a time unit) in {list(df.columns)}")


def parse_kernel_sum(df: pd.DataFrame) -> list[dict]:
    """``cuda_gpu_kern_sum`` rows: kernel name, total time (ns), instances; largest first."""
    if df.empty:
        return []
    total = _ns(df, "Total Time")
    rows = [{"name": str(name), "total_ns": float(t), "instances": int(n)}
            for name, t, n in zip(df["Name"], total, df["Instances"])]
    return sorted(rows, key=lambda r: -r["total_ns"])


def split_range(label: str) -> tuple[str, str]:
    """``"domain:name"`` -> ``(domain, name)``; the default domain is ``""``."""
    domain, sep, name = label.partition(":")
    return (domain, name) if sep else ("", label)


def parse_nvtx_sum(df: pd.DataFrame) -> list[dict]:
    """``nvtx_sum`` rows: domain, range, instances and wall-clock totals (ns) of every instance."""
    if df.empty:
        return []
    cols = {key: _ns(df, key) for key in ("Total Time", "Avg", "Med", "Min", "Max")}
    rows = []
    for i, label in enumerate(df["Range"]):
        domain, name = split_range(str(label))
        rows.append({"domain": domain, "range": name, "instances": int(df["Instances"].iloc[i]),
                     **{f"{k.lower().replace(' time', '')}_ns": float(v.iloc[i]) for k, v in cols.items()}})
    return rows


def parse_gpu_projection(df: pd.DataFrame) -> list[dict]:
    """``nvtx_gpu_proj_sum`` rows: GPU time projected onto each range (work its thread launched)."""
    if df.empty:
        return []
    proj, wall = _ns(df, "Total Proj Time"), _ns(df, "Total Range Time")
    rows = []
    for i, label in enumerate(df["Range"]):
        domain, name = split_range(str(label))
        rows.append({"domain": domain, "range": name, "instances": int(df["Range Instances"].iloc[i]),
                     "proj_ns": float(proj.iloc[i]), "range_ns": float(wall.iloc[i]),
                     "gpu_ops": int(df["Total GPU Ops"].iloc[i])})
    return rows
