"""The snakemake commands README and docs/ show, read from the pages themselves so that the tests run
what a reader sees."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def pages() -> list[Path]:
    """README, then every page under docs/, in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def text() -> str:
    """README and docs/ as one text (for what must be said somewhere a reader finds it)."""
    return "\n\n".join(page.read_text() for page in pages())


def is_snakemake(command: str) -> bool:
    """Whether ``command`` runs snakemake (after any ``VAR=value`` assignments)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    return bool(words) and words[0] == "snakemake"


def commands(text: str | None = None) -> list[str]:
    """Every snakemake command README and docs/*.md show (or ``text``, if given), in order, once each:
    the lines of their code blocks (continuation lines joined, comments dropped) and their inline
    code spans."""
    if text is None:
        return list(dict.fromkeys(c for page in pages() for c in commands(page.read_text())))
    found = []
    fence = re.compile(r"^```[^\n]*\n(.*?)^```", flags=re.M | re.S)
    for block in fence.findall(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if is_snakemake(line):
                found.append(re.sub(r"\s+", " ", line))
    found += [span for span in re.findall(r"`([^`\n]+)`", fence.sub("", text)) if is_snakemake(span)]
    return list(dict.fromkeys(found))


def readme_commands() -> list[str]:
    """The snakemake commands README itself shows."""
    return commands(README.read_text())


COMMITTED_RUNS_PAGE = DOCS / "committed-runs.md"


def rebuild_page_commands() -> list[str]:
    """The snakemake commands of docs/committed-runs.md, the page README sends a reader to for the
    committed runs: how they were made and the command that rebuilds each."""
    return commands(COMMITTED_RUNS_PAGE.read_text())


def main_command() -> str:
    """The first command under README's "## The main command"."""
    section = README.read_text().split("## The main command", 1)[1]
    return commands(section)[0]


def dry(command: str) -> str:
    """The same command as a dry run (``-n`` right after ``snakemake``, before any ``--``)."""
    return re.sub(r"\bsnakemake\b", "snakemake -n", command, count=1)


_PACKAGE = "cs336_systems."


def id_map_section() -> str:
    """README's section "From an ID to its code"."""
    return README.read_text().split("## From an ID to its code", 1)[1].split("\n## ", 1)[0]


def id_map_shown() -> list[str]:
    """The rows of README's table from an ID to its code, as README shows them."""
    return [line for line in id_map_section().splitlines() if re.match(r"^\| [A-Z]\d+ \|", line)]


def id_map_rows() -> list[str]:
    """README's table from an ID to its code, one row per deliverable, as the registry
    (``python -m cs336_systems.deliverables``) has it: rules and their file, what the measuring
    rules run (and the code the deliverable is about, where that differs), the report that writes
    ``results/<run>/<ID>/`` and the deliverables whose records it reads."""
    from cs336_systems import deliverables

    def short(module: str) -> str:
        return module[len(_PACKAGE):] if module.startswith(_PACKAGE) else module

    rows = []
    for d in deliverables.DELIVERABLES:
        rules = ", ".join(f"`{rule}`" for rule in deliverables.rules_of(d))
        runs = f"`{short(d.runs)}`" + (f" (about `{short(d.about)}`)" if d.about else "")
        reads = ", ".join(d.reads) or "–"
        rows.append(f"| {d.id} | {d.title} | {rules} in `{d.rules}` | {runs} | `{short(d.report)}` | {reads} |")
    return rows
