"""The small Markdown subset our writeup templates use, turned into HTML.

The templates write headings (``#``), paragraphs, ``- `` bullet lists and inline ``code``,
**bold** and *italic*. Tables and figures never pass through here: the writeup renders them to
HTML directly (pandas, base64 PNG) and they arrive as raw HTML blocks, which are kept as they are.
"""
from __future__ import annotations

import html
import itertools
import re

_EMPHASIS = [
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])"), r"<em>\1</em>"),
]


def inline(text: str) -> str:
    # Code spans first, protected from the emphasis rules by placeholders.
    spans: list[str] = []

    def stash(match: re.Match) -> str:
        spans.append(f"<code>{html.escape(match.group(1))}</code>")
        return f"\x00{len(spans) - 1}\x00"

    text = re.sub(r"`([^`]+)`", stash, text)
    text = html.escape(text, quote=False)
    for pattern, repl in _EMPHASIS:
        text = pattern.sub(repl, text)
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)


def _is_item(line: str) -> bool:
    return line.lstrip().startswith("- ")


def _paragraphs_and_lists(lines: list[str]) -> list[str]:
    """Consecutive ``- `` lines form a list; the lines between them form paragraphs."""
    out = []
    for is_list, group in itertools.groupby(lines, key=_is_item):
        group = list(group)
        if is_list:
            out.append("<ul>" + "".join(f"<li>{inline(line.lstrip()[2:])}</li>" for line in group) + "</ul>")
        else:
            out.append(f"<p>{inline(' '.join(line.strip() for line in group))}</p>")
    return out


def to_html(markdown: str) -> str:
    """Convert blocks separated by blank lines; a block that starts with ``<`` is raw HTML."""
    out = []
    for block in re.split(r"\n\s*\n", markdown.strip()):
        block = block.strip("\n")
        if not block.strip():
            continue
        if block.lstrip().startswith("<"):
            out.append(block)
        elif m := re.match(r"^(#{1,6})\s+(.*)$", block) if "\n" not in block else None:
            level = len(m.group(1))
            anchor = re.sub(r"[^a-z0-9]+", "-", m.group(2).lower()).strip("-")
            out.append(f'<h{level} id="{anchor}">{inline(m.group(2))}</h{level}>')
        else:
            out.extend(_paragraphs_and_lists(block.splitlines()))
    return "\n".join(out)
