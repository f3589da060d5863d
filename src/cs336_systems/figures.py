"""Drawing figures to files: matplotlib without a window, and one way to save a PNG.

Its own module so that code which draws while it measures (A5's timeline) shares the reports'
figure settings without importing the reports: a change to a report's tables then re-runs reports,
not GPU measurements.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")   # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig: plt.Figure, path: Path) -> None:
    """Write ``fig`` as a PNG at ``path`` (no software stamp, so the same figure gives the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
