"""D: render the writeup — one Markdown file and one self-contained HTML page — from summaries.

    python -m cs336_systems.report.writeup --run h100 --preset full --templates writeup/templates \\
        --summaries results/h100/A1/summary.json ... --md writeup/h100/writeup.md --html writeup/h100/writeup.html \\
        [--sections A2,A4,...] [--gpus-needed C1=2 C3=2 ...]

Every deliverable ID (``cs336_systems.deliverables``, in its order and with its title) has a
section. A section whose report rule left a ``summary.json`` renders ``<templates>/sections/<ID>.md.j2``
with that summary as ``d``, once the summary fits its section's schema (``contract.check``; one that
does not stops the writeup with a line naming the section, the file and the key); any other section says
why it is missing (``--sections`` and ``--gpus-needed`` say what this run chose and what each section
needs; the records say how many GPUs the run's jobs had, so the text is the same on whatever machine
renders it). The header is a table of contents that names, for every section, the run, card and commit
its numbers come from. Templates are rendered twice, once per output format: ``table()`` and
``figure()`` return Markdown in the first and HTML (images and long tables' CSV inlined as base64)
in the second, and markdown-it-py turns the rest of the second into HTML.
"""
from __future__ import annotations

import argparse
import base64
import html
import json
import math
import os
import re
import sys
from pathlib import Path

import jinja2
import pandas as pd
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin
from tabulate import tabulate

from cs336_systems.deliverables import BY_ID, DELIVERABLES
from cs336_systems.report import spread
from cs336_systems.report.contract import SummaryError
from cs336_systems.report.contract import check as check_summary

SECTIONS = {d.id: d.title for d in DELIVERABLES}     # every section, in order, with its title
# What the page says once, near its top, of how every section's verdicts are reached.
JUDGE = {"aa_rate": spread.AA_RATE, "min_rounds": spread.MIN_ROUNDS, "host_swing": spread.HOST_SWING}

# A table longer than this folds into <details> (the whole table, nothing cut) with its CSV beside it.
FOLD_ROWS = 40
CONTENTS = "contents"     # the table of contents' anchor, the same in both formats

HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
html {{ scroll-behavior: auto; }}
body {{ font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5;
       color: #222; overflow-wrap: break-word; }}
h2 {{ border-top: 1px solid #ddd; padding-top: 1rem; margin-top: 2.5rem; }}
/* A table takes at most the page's width, its text cells wrapping; where even that is too narrow (a phone) it scrolls inside the page, not the page itself. */
table {{ display: block; max-width: 100%; width: fit-content; overflow-x: auto; border-collapse: collapse;
         font-size: 0.85rem; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; overflow-wrap: anywhere; }}
th {{ background: #f4f4f4; }}
/* Numbers right-aligned (tabulate and markdown-it set text-align per column), in even digits, one line; their headers wrap. */
td[style*="right"] {{ white-space: nowrap; font-variant-numeric: tabular-nums; }}
details.long-table {{ margin: 1rem 0; }} details.long-table > summary {{ cursor: pointer; color: #1a5fb4; }}
/* A section's method, run and tables: one click below its answer. */
details.method {{ margin: 1rem 0; }} details.method > summary {{ cursor: pointer; color: #1a5fb4; font-weight: 600; }}
/* On paper a figure takes at most a third of a page; the answers, not the figures, set the length. */
@media print {{ img {{ max-height: 3.3in; width: auto; }} h2 {{ break-after: avoid; }} figure {{ break-inside: avoid; }} }}
img {{ max-width: 100%; height: auto; }} figure {{ margin: 1rem 0; }} figcaption {{ font-size: 0.9rem; color: #555; }}
code {{ background: #f4f4f4; padding: 0 0.2rem; overflow-wrap: anywhere; }}
pre {{ overflow-x: auto; }}
p.back {{ font-size: 0.85rem; }} p.csv {{ font-size: 0.85rem; color: #555; }}
a.to-contents {{ position: fixed; right: 1rem; bottom: 1rem; background: #fff; border: 1px solid #ccc;
                 border-radius: 0.3rem; padding: 0.1rem 0.5rem; font-size: 0.85rem; text-decoration: none; }}
</style></head><body>
{body}
<a class="to-contents" href="#{contents}">↑ Contents</a>
</body></html>
"""


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _setting(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _sci(value, digits: int = 1) -> str:
    """``value`` in scientific notation as prose writes it, "4.6·10¹⁴": the template states a
    closed form's constant without dividing it by a power of ten it types itself."""
    if value is None:
        return "n/a"
    exponent = math.floor(math.log10(abs(value))) if value else 0
    mantissa = value / 10 ** exponent
    if abs(round(mantissa, digits)) >= 10:        # 9.96 rounds up to the next power
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.{digits}f}·10{str(exponent).translate(_SUPERSCRIPT)}"


def _pct(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f} %"


def _span(values, digits: int = 0, write=_fmt) -> str:
    """The range of ``values`` as ``write(value, digits)`` writes its ends, "lo–hi", or the one number
    where both ends read alike: a template words a range without comparing or computing."""
    values = list(values)
    lo, hi = write(min(values), digits), write(max(values), digits)
    return lo if lo == hi else f"{lo}–{hi}"


def _and_join(values, names: dict | None = None, suffix: str = "") -> str:
    """"a", "a and b", "a, b and c": each value (or its entry in ``names``) with ``suffix``."""
    words = [f"{names[v] if names is not None else v}{suffix}" for v in values]
    if len(words) < 2:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


BINARY_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def _binary_size(value, unit: str = "B") -> str:
    """An amount of memory given in ``unit`` written in the largest binary unit it reaches from KiB
    up to GiB: "1.50 GiB", "12.0 MiB", "0.5 KiB"."""
    n = value * BINARY_UNITS[unit]
    if n >= BINARY_UNITS["GiB"]:
        return f"{n / BINARY_UNITS['GiB']:,.2f} GiB"
    if n >= BINARY_UNITS["MiB"]:
        return f"{n / BINARY_UNITS['MiB']:,.1f} MiB"
    return f"{n / BINARY_UNITS['KiB']:,.1f} KiB"


def github_slug(text: str) -> str:
    """The anchor GitHub gives a Markdown heading (lower case, punctuation dropped, spaces to '-')."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def html_slug(text: str) -> str:
    """The anchor of a heading in the HTML page: a section's ID ("A1. End-to-end …" -> "A1"), else
    GitHub's slug, so the Markdown and the page link to the same words."""
    m = re.match(r"(\w+)\. ", text)
    return m.group(1) if m and m.group(1) in SECTIONS else github_slug(text)


def to_html(markdown: str) -> str:
    """CommonMark with tables (markdown-it-py); raw HTML blocks (our tables and figures) pass through;
    level-2 headings get their ``html_slug`` as id."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    anchors_plugin(md, min_level=2, max_level=2, slug_func=html_slug)
    return md.render(markdown)


# A cell that reads as a number: "12.3", "1,024", "-4e-05", "12.3 ± 0.4", "805.1–815.3", "2.20×", "7.1 %".
_N = r"[-+−]?(\d[\d,]*(\.\d*)?|\.\d+)(e[-+]?\d+)?"
_NUMBER = re.compile(rf"{_N}(\s*(±|–)\s*{_N})?\s*(%|×|x|ms|us|µs|s|B|KB|MB|GB|KiB|MiB|GiB|GB/s)?", re.IGNORECASE)
# What stands in a numeric column where there is no number.
_NO_NUMBER = {"", "n/a", "na", "nan", "-", "–", "—", "inf", "-inf", "inf/nan", "oom", "missing", "skipped", "error"}


def column_alignment(values: pd.Series) -> str:
    """``right`` for a column of numbers (with their spread, unit or an OOM here and there), else ``left``."""
    if pd.api.types.is_bool_dtype(values):
        return "left"
    if pd.api.types.is_numeric_dtype(values):
        return "right"
    cells = [str(v).strip() for v in values]
    numbers = [c for c in cells if c.lower() not in _NO_NUMBER]
    return "right" if numbers and all(_NUMBER.fullmatch(c) for c in numbers) else "left"


# A CSV column's name as a table header: words, the unit in brackets ("eager_forward_ms" ->
# "eager forward (ms)"). The CSV keeps the names code reads; a reader gets the words. Units are the
# name's last part; the abbreviations our names use are spelled out.
_UNITS = {"ms": "ms", "us": "µs", "s": "s", "MiB": "MiB", "GiB": "GiB", "MB": "MB", "GB": "GB", "pct": "%",
          "GBps": "GB/s", "GiBps": "GiB/s", "mb": "MB"}
_WORDS = {"comm": "communication", "fwd": "forward", "bwd": "backward", "algbw": "algorithm bandwidth",
          "busbw": "bus bandwidth", "se": "std. error", "nvtx": "NVTX", "a1": "A1's", "c1": "with C1's o",
          "mb": "MB", "rel": "relative", "abs": "absolute", "diff": "difference", "tb": "TB", "flops": "FLOPs",
          "tflops": "TFLOP/s", "std": "std", "hbm": "HBM", "lse": "LSE", "dq": "dQ", "dk": "dK", "dv": "dV", "o": "O",
          "tp": "TP", "gpu": "GPU", "gpus": "GPUs", "mfu": "MFU"}


def header_words(column: str) -> str:
    """``column`` in words with its unit, as ``_UNITS`` and ``_WORDS`` spell them; a name that is
    already words (a space, a sign, a capital) stays as it is."""
    parts = column.split("_")
    if len(parts) == 1 and column not in _UNITS:
        return _WORDS.get(column, column)
    # the unit is the last part, or the part before "per ..." ("kernel_us_per_kernel": µs per kernel)
    at = len(parts) - 1
    if "per" in parts[1:-1] and parts[parts.index("per", 1) - 1] in _UNITS:
        at = parts.index("per", 1) - 1
    unit = _UNITS.get(parts[at]) if len(parts) > 1 else None
    if unit is None:
        return " ".join(_WORDS.get(w, w) for w in parts)
    words = " ".join(_WORDS.get(w, w) for w in parts[:at])
    return f"{words} ({' '.join([unit, *parts[at + 1:]])})"


# The most columns a table shows at once: a reader takes in that many at the page's width (1400 px).
MAX_COLUMNS = 8


def column_parts(alignment: list[str], most: int = MAX_COLUMNS) -> list[list[int]]:
    """A table's columns as tables of at most ``most`` each, read one under the other: the leading
    text columns that name a row (up to three: size, context, mode) repeated in each, the rest in
    order. A table that fits is one part."""
    if len(alignment) <= most:
        return [list(range(len(alignment)))]
    keys = 0
    while keys < min(3, len(alignment) - 1) and alignment[keys] == "left":
        keys += 1
    keys = max(keys, 1)
    rest, step = list(range(keys, len(alignment))), most - keys
    return [list(range(keys)) + rest[i:i + step] for i in range(0, len(rest), step)]


SIGNIFICANT = 4      # digits a table cell shows; the CSV beside it keeps every digit


def readable(value: float) -> str:
    """A float as a table cell: four significant digits (0.2184, 4.904, 392.4, 1108), whole numbers
    from 1,000 up, scientific notation only below 0.0001 — not tabulate's six (0.218432, 1.10813),
    which claim a precision no timing here has."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 999.95:
        return f"{value:.0f}"
    return f"{value:.{SIGNIFICANT}g}"


def _float_or_none(cell) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def readable_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its float columns as ``readable`` strings (integer columns stay as they are). A
    column of numbers with empty cells (a row with no such number) reads as text from the CSV: its
    numbers are made readable too, its empty cells kept."""
    out = df.copy()
    for column in out.columns:
        values = out[column]
        if pd.api.types.is_float_dtype(values):
            out[column] = [readable(v) for v in values]
        elif values.dtype == object or pd.api.types.is_string_dtype(values):
            cells = [str(v).strip() for v in values]
            numbers = [_float_or_none(c) for c in cells if c]
            if numbers and all(n is not None for n in numbers) and any("." in c or "e" in c.lower() for c in cells):
                out[column] = [readable(float(c)) if c else "" for c in cells]
    return out


class Renderer:
    """Renders the templates for one output format (``md`` or ``html``)."""

    def __init__(self, fmt: str, out_path: Path, templates: Path, run: str = ""):
        self.fmt, self.out_dir, self.run = fmt, out_path.parent, run
        self.headlines: dict[str, str] = {}     # each rendered section's one-line answer, for the contents
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
        self.env.filters["f"] = _fmt
        self.env.filters["pct"] = _pct
        # a range of numbers ("3–7", or "5" where both ends read alike), as `f` or `pct` writes them
        self.env.filters["span"] = _span
        self.env.filters["pct_span"] = lambda values, digits=0: _span(values, digits, _pct)
        self.env.filters["binary_size"] = _binary_size
        self.env.filters["and_join"] = _and_join
        # a share as a signed number of per cent, the sign always written and the "%" left to the template
        self.env.filters["signed_pct"] = lambda v, digits=1: f"{100 * v:+.{digits}f}"
        # milliseconds written in microseconds, with the unit: per-call costs are tens of µs
        self.env.filters["us"] = lambda v, digits=1: "n/a" if v is None else f"{1000 * v:,.{digits}f} µs"
        # bytes in decimal gigabytes and FLOPs in TFLOP, with the unit (bandwidth and rates are decimal)
        self.env.filters["gb"] = lambda v, digits=2: f"{v / 1e9:,.{digits}f} GB"
        self.env.filters["tflop"] = lambda v, digits=3: f"{v / 1e12:,.{digits}f} TFLOP"
        self.env.filters["sci"] = _sci
        self.env.filters["as_time"] = spread.as_time      # a verdict on a time: "faster", "slower", ...
        # a setting as it was given: a whole number without decimals (1,000), else three significant digits (0.5)
        self.env.filters["setting"] = _setting
        self.env.filters["billion"] = lambda v, digits=1: f"{v / 1e9:,.{digits}f} billion"

    def anchor(self, ident: str) -> str:
        """The link target of section ``ident`` in this format."""
        return ident if self.fmt == "html" else github_slug(f"{ident}. {SECTIONS[ident]}")

    def table(self, folder: Path, name: str = "table", fold_over: int = FOLD_ROWS, exact: bool = False,
              columns: list[str] | None = None) -> str:
        """The table: numbers right-aligned, text left, floats ``readable`` unless ``exact`` (a table
        whose subject is the digits themselves: A3's sums, where 0.999999 is not 1); longer than
        ``fold_over`` rows, folded (``<details>``) with a link to its CSV. ``columns``: the ones shown,
        in that order, a view of a table too wide to read in one piece (a section shows a wide CSV as
        two or more views); the text then says how many the CSV has and links it."""
        csv_path = folder / f"{name}.csv"
        df = pd.read_csv(csv_path, keep_default_na=False)
        width = len(df.columns)
        if columns is not None and df.empty:
            # a report writes a table with no rows as one placeholder column: no view of it can show its columns
            return f"*No rows in this run: `{name}.csv` is empty.*"
        if columns is not None:
            missing = [c for c in columns if c not in df.columns]
            if missing:
                raise ValueError(f"{csv_path} has no column {', '.join(missing)} (it has {', '.join(df.columns)})")
            df = df[list(columns)]
        colalign = [column_alignment(df[c]) for c in df.columns] or None
        if not exact:
            df = readable_frame(df)
        df = df.rename(columns=header_words)
        fold = len(df) > fold_over
        what = f"all {len(df)} rows × {len(df.columns)} columns of <code>{name}.csv</code> (click to show)"
        # Where the table is folded its CSV is linked anyway; a view says what it leaves out.
        view = (f"{len(df.columns)} of the {width} columns of" if len(df.columns) < width else None)
        parts = column_parts(list(colalign or []))
        if self.fmt == "md":
            text = "\n\n".join(tabulate(df.iloc[:, part], headers="keys", tablefmt="pipe", showindex=False,
                                         colalign=[colalign[i] for i in part]) for part in parts)
            link = os.path.relpath(csv_path, self.out_dir)
            if fold:
                text = (f"<details><summary>{what}</summary>\n\n{text}\n\n</details>\n\n"
                        f"*The same {len(df)} rows as CSV: [{name}.csv]({link}).*")
            return text + (f"\n\n*{view} [{name}.csv]({link}).*" if view else "")
        # HTML: one raw block with no blank line in it (a blank line would end it in CommonMark).
        text = "\n".join(tabulate(df.iloc[:, part], headers="keys", tablefmt="html", showindex=False,
                                  colalign=[colalign[i] for i in part]) for part in parts)
        if not fold and not view:
            return text
        data = base64.b64encode(csv_path.read_bytes()).decode()
        download = f"{folder.name}-{name}.csv"
        csv_link = (f'<a download="{html.escape(download)}" href="data:text/csv;base64,{data}">'
                    f"{html.escape(name)}.csv</a> (<code>{html.escape(str(csv_path))}</code> in the repository)")
        if fold:
            text = (f'<details class="long-table"><summary>{what}</summary>\n{text}\n</details>\n'
                    f'<p class="csv">The same {len(df)} rows as CSV: {csv_link}.</p>')
        return text + (f'\n<p class="csv">{view} {csv_link}.</p>' if view else "")

    def figure(self, folder: Path, name: str, caption: str) -> str:
        path = folder / name
        if self.fmt == "md":
            return f"![{caption}]({os.path.relpath(path, self.out_dir)})\n\n*{caption}*"
        data = base64.b64encode(path.read_bytes()).decode()
        return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}">'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def section(self, ident: str, summary_path: Path | None, source: dict | None = None) -> str:
        heading = f"## {ident}. {SECTIONS[ident]}"
        back = f"[↑ Contents](#{CONTENTS})"
        if summary_path is None:
            return f"{heading}\n\n*Not built yet: {self.missing(source or {})}.*\n\n{back}\n"
        folder = summary_path.parent
        summary = json.loads(summary_path.read_text())
        check_summary(ident, summary, summary_path)
        template = self.env.get_template(f"sections/{ident}.md.j2")
        context = template.new_context(dict(
            heading=heading, d=summary, folder=str(folder), problem=BY_ID[ident].problem,
            table=lambda name="table", fold_over=FOLD_ROWS, exact=False, columns=None: self.table(
                folder, name, fold_over, exact, columns),
            figure=lambda name, caption: self.figure(folder, name, caption),
            section_link=lambda other: f"[{other}. {SECTIONS[other]}](#{self.anchor(other)})"))
        text = "".join(template.root_render_func(context))
        # The headline is rendered with the section's own context (its top-level sets and imports,
        # which the whole render above has run), so it reads the same numbers in the same words.
        if "headline" in template.blocks:
            self.headlines[ident] = " ".join("".join(template.blocks["headline"](context)).split())
        return f"{text.rstrip()}\n\n{back}\n"

    def document(self, run: str, preset: str, summaries: dict[str, Path], sources: dict[str, dict],
                 chosen: list[str] | None = None) -> str:
        sections = [self.section(ident, summaries.get(ident), sources[ident]) for ident in SECTIONS]
        contents = [{"ident": ident, "title": SECTIONS[ident], "link": f"#{self.anchor(ident)}",
                     "answer": self.headlines.get(ident), "source": self.source_cell(run, sources[ident])}
                    for ident in SECTIONS]
        return self.env.get_template("writeup.md.j2").render(
            run=run, preset=preset, sections=sections, contents=contents, contents_anchor=CONTENTS,
            built=[ident for ident in SECTIONS if ident in summaries], rebuild=rebuild_command(run, preset, chosen),
            archive=archive_of(summaries), judge=JUDGE if summaries else None)

    def missing(self, source: dict) -> str:
        """Why a section is missing, and which other runs have it (linked where their writeup is), in Markdown."""
        text = source.get("missing") or "no summary was given to the writeup"
        for other in source.get("elsewhere", []):
            target = other["writeup"].with_suffix(f".{self.fmt}")
            if target.exists():
                link = f"{os.path.relpath(target, self.out_dir)}#{self.anchor(other['ident'])}"
                text += f"; run `{other['run']}` has it ([its writeup]({link}))"
            else:
                text += f"; run `{other['run']}` has it"
        return text

    def source_cell(self, run: str, source: dict) -> str:
        """One row's "numbers from" cell of the table of contents, in Markdown."""
        if "missing" in source:
            return f"**not built**: {self.missing(source)}"
        p = source["provenance"]
        counts = p.get("gpu_counts") or []
        several = [c for c in counts if c > 1]     # GPUs per job where a job had more than one
        cards = ", ".join(p["gpus"]) + (" ×" + "/".join(map(str, several)) if several else "")
        dates = p.get("dates") or "no date"
        commits = ", ".join(f"`{c}`" for c in p["commits"]) or "no commit"
        not_ok = [f"{n} {s}" for s, n in p["statuses"].items() if n and s != "ok"]
        records = f"{p['records']} record{'s' if p['records'] != 1 else ''}" + (f" ({', '.join(not_ok)})" if not_ok else "")
        cell = f"run `{run}` · {cards} · commit {commits}{' (dirty)' if p.get('dirty') else ''} · {dates} · {records}"
        if source.get("parts"):
            cell += " · only part " + ", ".join(f"({part})" for part in source["parts"])
        return cell


def archive_of(summaries: dict[str, Path]) -> str:
    """What the run is, where its run folder says it is an archive (``pipeline.run_folder``), else ''."""
    for path in summaries.values():
        identity = path.parents[1] / "run.json"
        if identity.is_file():
            return json.loads(identity.read_text()).get("archive", "")
    return ""


def rebuild_command(run: str, preset: str, chosen: list[str] | None) -> str:
    """The command that rebuilds this writeup from its run's records, measuring nothing:
    docs/committed-runs.md gives the same command for each committed run (a test holds them equal)."""
    sections = f" sections={','.join(chosen)}" if chosen else ""
    return f"snakemake --cores 2 --config preset={preset} run={run} reuse_records=true{sections}"


def section_sources(run: str, summaries: dict[str, Path], chosen: list[str] | None,
                    gpus_needed: dict[str, int], gpus_here: int | None = None) -> dict[str, dict]:
    """For each section: the provenance its numbers come from, or why it is missing (and which other
    runs beside this one, under the same results folder, have it).

    How many GPUs the run's jobs had is the most its records name, or what one job gets on the
    machine that renders it (``gpus_here``, unknown on a machine without GPUs) where that is more:
    a CPU job's record names the GPUs its machine showed, 0 on a CPU, so a run of C9's closed form
    alone says the same on a one-GPU machine as in a test that fakes one. A run whose records all
    name 0, rendered where no GPU shows, had 0."""
    provenance = {ident: json.loads(path.read_text()).get("provenance") or {} for ident, path in summaries.items()}
    counts = [c for p in provenance.values() for c in p.get("gpu_counts") or []]
    had = max([c for c in counts if c > 0] + ([gpus_here] if gpus_here else []), default=None)
    if had is None and counts:
        had = 0                 # every job ran where no GPU showed
    roots = {path.parents[2] for path in summaries.values()}
    sources = {}
    for ident in SECTIONS:
        if ident in summaries:
            parts = [s[len(ident):] for s in chosen or [] if s[:-1] == ident and s[-1].isalpha()]
            sources[ident] = {"provenance": provenance[ident], "parts": [] if ident in (chosen or []) else parts}
            continue
        rebuild = f"`sections={','.join(chosen if ident in chosen else [*chosen, ident])}`" if chosen else ""
        need = gpus_needed.get(ident, 0)
        if had is not None and need > had:
            why = f"needs {need} GPU{'s' if need > 1 else ''}; this run's jobs had {had}" + (
                f" (measure it on a {need}-GPU machine with {rebuild})" if rebuild else "")
        elif chosen is not None and ident not in chosen:
            why = f"not measured in this run: rebuild with {rebuild}"
        else:
            why = "no summary was given to the writeup"
        elsewhere = []
        for root in sorted(roots):
            for other in sorted(root.glob(f"*/{ident}/summary.json")):
                other_run = other.parents[1].name
                prov = json.loads(other.read_text()).get("provenance") or {}
                if other_run != run and prov.get("gpus") not in (None, ["CPU only"]):   # smoke runs mean nothing
                    elsewhere.append({"run": other_run, "ident": ident,
                                      "writeup": root.parent / "writeup" / other_run / "writeup.md"})
        sources[ident] = {"missing": why, "elsewhere": elsewhere}
    return sources


def render(run: str, preset: str, summary_paths: list[Path], md_path: Path, html_path: Path, templates: Path,
           chosen: list[str] | None = None, gpus_needed: dict[str, int] | None = None,
           gpus_here: int | None = None) -> None:
    summaries = {}
    for path in summary_paths:
        ident = path.parent.name
        if ident not in SECTIONS:
            raise SystemExit(f"writeup: {path} is not in a deliverable's folder (one of {', '.join(SECTIONS)})")
        summaries[ident] = path
    sources = section_sources(run, summaries, chosen, gpus_needed or {}, gpus_here)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(Renderer("md", md_path, templates, run).document(run, preset, summaries, sources, chosen))
    body = to_html(Renderer("html", html_path, templates, run).document(run, preset, summaries, sources, chosen))
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(HTML_PAGE.format(title=f"Lab notebook: run {html.escape(run)}", body=body, contents=CONTENTS))


def _gpus_needed(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        ident, _, n = item.partition("=")
        if ident not in SECTIONS or not n.isdigit():
            raise SystemExit(f"writeup: --gpus-needed takes ID=N with ID one of {', '.join(SECTIONS)}; got {item!r}")
        out[ident] = int(n)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.report.writeup", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--preset", required=True)
    p.add_argument("--templates", required=True, type=Path,
                   help="the templates folder: writeup.md.j2 and sections/<ID>.md.j2")
    p.add_argument("--summaries", nargs="*", default=[], type=Path)
    p.add_argument("--md", required=True, type=Path)
    p.add_argument("--html", required=True, type=Path)
    p.add_argument("--sections", default="all",
                   help="the run's `sections` setting (comma-separated IDs, or 'all'), to say why a section is missing")
    p.add_argument("--gpus-needed", nargs="*", default=[], metavar="ID=N",
                   help="GPUs a section's jobs need in this preset, to say why a section is missing")
    p.add_argument("--gpus-here", type=int, default=None, metavar="N",
                   help="GPUs one job gets on this machine (none where it shows no GPU), counted with the records' GPUs per job")
    args = p.parse_args(argv)
    chosen = None if args.sections == "all" else [s.strip() for s in args.sections.split(",") if s.strip()]
    try:
        render(args.run, args.preset, args.summaries, args.md, args.html, args.templates, chosen,
               _gpus_needed(args.gpus_needed), args.gpus_here)
    except SummaryError as e:
        raise SystemExit(str(e)) from None
    print(f"writeup: {len(args.summaries)} of {len(SECTIONS)} sections built -> {args.md}, {args.html}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
