"""README's snakemake commands, read from README itself so that the tests run what it shows."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


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
    """Every snakemake command README shows, in order, once each: the lines of its code blocks
    (continuation lines joined, comments dropped) and its inline code spans."""
    text = README.read_text() if text is None else text
    found = []
    fence = re.compile(r"^```[^\n]*\n(.*?)^```", flags=re.M | re.S)
    for block in fence.findall(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if is_snakemake(line):
                found.append(re.sub(r"\s+", " ", line))
    found += [span for span in re.findall(r"`([^`\n]+)`", fence.sub("", text)) if is_snakemake(span)]
    return list(dict.fromkeys(found))


def main_command() -> str:
    """The first command under "## The main command"."""
    section = README.read_text().split("## The main command", 1)[1]
    return commands(section)[0]


def dry(command: str) -> str:
    """The same command as a dry run (``-n`` right after ``snakemake``, before any ``--``)."""
    return re.sub(r"\bsnakemake\b", "snakemake -n", command, count=1)
