"""The committed notebook as a reader gets it: every section opens with its question and an answer
of at most three sentences that quotes a number, the contents table repeats each answer, and the page
prints to at most 40 Letter pages with no table wider than a 1400 px window (the browser tests)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cs336_systems.report.writeup import SECTIONS, Renderer

from .browser import _launch, require_browser

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "writeup" / "templates"
RUN = "h200"
PAGE = ROOT / "writeup" / RUN / "writeup.html"
MAX_SENTENCES, MAX_PAGES, WIDTH, MAX_COLUMNS = 3, 40, 1400, 8


def sentences(paragraph: str) -> int:
    """How many sentences a Markdown paragraph holds: ends of sentence (., ! or ?) before a capital,
    emphasis or the paragraph's end. Links, code spans and bracketed asides are not searched ("(e.g. 1.2×)")."""
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "link", paragraph)        # "[C8. Bucket sizes](#c8)" is a name
    text = re.sub(r"`[^`]*`", "code", text)
    text = re.sub(r"\([^()]*\)", "(aside)", text)
    return len(re.findall(r"[.!?](?=\s+[A-Z*]|\s*$)", text.strip()))


@pytest.mark.parametrize("text, count", [
    ("One. Two? Three!", 3), ("Speed 1.2× (e.g. at N 1024). Then more.", 2), ("`a. B` holds.", 1),
    ("bf16 is 2.0× faster at 2.7B: a. b. Sure.", 2), ("See [C8. Bucket sizes](#c8-bucket). Done.", 2)])
def test_sentences_are_counted(text, count):
    assert sentences(text) == count


def _answer(section: str) -> str:
    """The paragraph that follows the question: it must start with **Answer.**"""
    paragraphs = [p for p in section.split("\n\n") if p.strip()]
    assert paragraphs[0].startswith("## "), paragraphs[0]
    assert paragraphs[1].startswith("*") and paragraphs[1].rstrip().endswith("?**"), paragraphs[1]
    assert paragraphs[2].startswith("**Answer.** "), paragraphs[2][:200]
    return paragraphs[2][len("**Answer.** "):]


@pytest.mark.parametrize("ident", list(SECTIONS))
def test_each_section_opens_with_its_question_and_a_short_answer(ident):
    summary = ROOT / "results" / RUN / ident / "summary.json"
    if not summary.is_file():
        pytest.skip(f"run {RUN} has no {ident}")
    renderer = Renderer("md", ROOT / "writeup" / RUN / "writeup.md", TEMPLATES, RUN)
    answer = _answer(renderer.section(ident, summary))
    assert 1 <= sentences(answer) <= MAX_SENTENCES, f"{ident}'s answer has {sentences(answer)} sentences: {answer}"
    assert re.search(r"\d", answer), f"{ident}'s answer quotes no number: {answer}"
    headline = renderer.headlines.get(ident)
    assert headline and sentences(headline) == 1, f"{ident}'s headline: {headline!r}"
    assert " ".join(answer.split()).startswith(headline), "the answer starts with the contents' line"
    assert json.loads(summary.read_text())["provenance"]       # the run line behind the click reads it


@pytest.mark.slow
def test_the_committed_page_prints_short_and_fits_its_window():
    from playwright.sync_api import sync_playwright

    executable = require_browser()
    with sync_playwright() as p:
        browser = _launch(p, executable)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto(PAGE.as_uri(), wait_until="load")
            pdf = page.pdf(format="Letter")
            pages = len(re.findall(rb"/Type\s*/Page(?!s)", pdf))
            assert pages <= MAX_PAGES, f"{PAGE.relative_to(ROOT)} prints to {pages} Letter pages"
            # every table, unfolded, shown whole: no more columns than a reader takes in, none scrolled
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            tables = page.evaluate("""Array.from(document.querySelectorAll('table')).map(t => ({
                columns: t.rows.length ? t.rows[0].cells.length : 0, cut: t.scrollWidth - t.clientWidth,
                head: t.rows.length ? t.rows[0].innerText.slice(0, 80) : ''}))""")
        finally:
            browser.close()
    wide = [t for t in tables if t["columns"] > MAX_COLUMNS or t["cut"] > 1]
    assert not wide, f"{len(wide)} tables too wide at {WIDTH} px: {wide[:5]}"


def tables_glued_to_text(markdown: str) -> list[int]:
    """Line numbers where a table starts right under a line of text: Markdown readers that need a
    blank line before a table (GitHub's among them) show such a table as that paragraph's text."""
    lines = markdown.split("\n")
    return [i + 1 for i in range(1, len(lines))
            if lines[i].startswith("|") and lines[i - 1].strip() and not lines[i - 1].startswith("|")]


def test_a_table_glued_to_its_paragraph_is_found():
    assert tables_glued_to_text("Text.\n| a |\n|--|\n\nMore.\n\n| b |\n|--|") == [2]


def test_every_table_of_the_committed_page_follows_a_blank_line():
    assert tables_glued_to_text((ROOT / "writeup" / RUN / "writeup.md").read_text()) == []
