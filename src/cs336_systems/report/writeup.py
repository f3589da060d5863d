"""D: render the writeup — one Markdown file and one self-contained HTML page — from summaries.

    python -m cs336_systems.report.writeup --run h100 --preset full \\
        --summaries results/h100/A1/summary.json ... --md writeup/h100/writeup.md --html writeup/h100/writeup.html

Every deliverable ID has a section. A section whose report rule left a ``summary.json`` renders
``writeup/templates/sections/<ID>.md.j2`` with that summary as ``d``; any other section says
plainly that its data are not built. Templates are rendered twice, once per output format:
``table()`` and ``figure()`` return Markdown in the first and HTML (images inlined as base64) in
the second, and the prose is converted by ``report.markup``.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

import jinja2
import pandas as pd

from cs336_systems.report.markup import to_html

TEMPLATES = Path(__file__).resolve().parents[3] / "writeup" / "templates"

SECTIONS = {
    "A1": "End-to-end benchmark", "A2": "Nsight Systems profile", "A3": "Accumulation in low precision",
    "A4": "Mixed precision", "A5": "Memory", "A6": "Gradient checkpointing",
    "B1": "PyTorch attention sweep", "B2": "torch.compile", "B3": "FlashAttention-2 forward",
    "B4": "FlashAttention-2 backward", "B5": "FlashAttention benchmark",
    "C1": "All-reduce benchmark", "C2": "Naive DDP", "C3": "Naive DDP benchmark", "C4": "Flat DDP",
    "C5": "Overlapping DDP", "C6": "Overlapping DDP benchmark", "C7": "Bucketed DDP",
    "C8": "Bucket sizes and the overhead model", "C9": "4D-parallelism accounting",
    "C10": "Optimizer state sharding", "C11": "Optimizer state sharding: memory and time", "C12": "FSDP",
}

HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85rem; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }}
th {{ background: #f4f4f4; }}
img {{ max-width: 100%; }} figure {{ margin: 1rem 0; }} figcaption {{ font-size: 0.9rem; color: #555; }}
code {{ background: #f4f4f4; padding: 0 0.2rem; }} .missing {{ color: #8a6d3b; }}
</style></head><body>
{body}
</body></html>
"""


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


class Renderer:
    """Renders the templates for one output format (``md`` or ``html``)."""

    def __init__(self, fmt: str, out_path: Path):
        self.fmt, self.out_dir = fmt, out_path.parent
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
        self.env.filters["f"] = _fmt
        self.env.filters["pct"] = lambda v, digits=1: "n/a" if v is None else f"{100 * v:.{digits}f} %"

    def table(self, folder: Path, name: str = "table", max_rows: int | None = None) -> str:
        df = pd.read_csv(folder / f"{name}.csv", keep_default_na=False)
        note = ""
        if max_rows is not None and len(df) > max_rows:
            note = f"\n\n*First {max_rows} of {len(df)} rows; all in `{folder / name}.csv`.*"
            df = df.head(max_rows)
        if self.fmt == "md":
            return df.to_markdown(index=False) + note
        return df.to_html(index=False, border=0) + ("\n\n" + to_html(note) if note else "")

    def figure(self, folder: Path, name: str, caption: str) -> str:
        path = folder / name
        if self.fmt == "md":
            return f"![{caption}]({os.path.relpath(path, self.out_dir)})\n\n*{caption}*"
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<figure><img src="data:image/png;base64,{data}" alt="{caption}"><figcaption>{caption}</figcaption></figure>'

    def section(self, ident: str, summary_path: Path | None) -> str:
        heading = f"## {ident}. {SECTIONS[ident]}"
        if summary_path is None:
            return f"{heading}\n\n*Not built yet: this run has no data for {ident}.*\n"
        folder = summary_path.parent
        template = self.env.get_template(f"sections/{ident}.md.j2")
        return template.render(
            heading=heading, d=json.loads(summary_path.read_text()), folder=str(folder),
            table=lambda name="table", max_rows=None: self.table(folder, name, max_rows),
            figure=lambda name, caption: self.figure(folder, name, caption))

    def document(self, run: str, preset: str, summaries: dict[str, Path]) -> str:
        sections = [self.section(ident, summaries.get(ident)) for ident in SECTIONS]
        return self.env.get_template("writeup.md.j2").render(run=run, preset=preset, sections=sections,
                                                              built=sorted(summaries), all_ids=list(SECTIONS))


def render(run: str, preset: str, summary_paths: list[Path], md_path: Path, html_path: Path) -> None:
    summaries = {}
    for path in summary_paths:
        ident = path.parent.name
        if ident not in SECTIONS:
            raise SystemExit(f"writeup: {path} is not in a deliverable's folder (one of {', '.join(SECTIONS)})")
        summaries[ident] = path
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(Renderer("md", md_path).document(run, preset, summaries))
    body = to_html(Renderer("html", html_path).document(run, preset, summaries))
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(HTML_PAGE.format(title=f"Lab notebook: run {run}", body=body))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.writeup", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--preset", required=True)
    p.add_argument("--summaries", nargs="*", default=[], type=Path)
    p.add_argument("--md", required=True, type=Path)
    p.add_argument("--html", required=True, type=Path)
    args = p.parse_args(argv)
    render(args.run, args.preset, args.summaries, args.md, args.html)
    print(f"writeup: {len(args.summaries)} of {len(SECTIONS)} sections built -> {args.md}, {args.html}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
