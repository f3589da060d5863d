"""Open a writeup page in a real headless browser (Debian's chromium, driven by Playwright) and
check what a reader sees. Used by tests/writeup (a writeup rendered from synthetic records) and by
tests/workflow (the smoke DAG's writeup).

Without Playwright or a chromium, the tests that use it skip, except under CI=true, where they fail:
.ci/setup-chromium.sh installs both. ``CS336_CHROMIUM`` names another browser binary.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

# Tags our pages use: any of them showing up in the page's text means HTML was escaped, not rendered.
RAW_TAG = re.compile(r"</?(html|body|table|thead|tbody|tr|td|th|div|img|figure|figcaption|details|summary|p|code|a|"
                     r"span|br|ul|ol|li|h[1-6]|em|strong|pre|style|script)\b[^<>]*>", re.IGNORECASE)
RAW_ENTITY = re.compile(r"&(lt|gt|amp|quot|#\d+);")
# Viewport widths the page must fit: a laptop and a phone.
WIDTHS = (1280, 390)


def chromium_path() -> str | None:
    named = os.environ.get("CS336_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def require_browser() -> str:
    """The chromium binary, with Playwright importable; skip (fail under CI=true) otherwise."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the Python package playwright (`pip install -e '.[test]'`)")
    browser = chromium_path()
    if browser is None:
        missing.append("a chromium binary (Debian: `apt-get install chromium`)")
    if missing:
        message = "browser test needs " + " and ".join(missing) + "; .ci/setup-chromium.sh installs both"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return browser


def _launch(playwright, executable: str):
    # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
    return playwright.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])


def check_page(path: Path, screenshot: Path | None = None) -> dict:
    """Open ``path`` and assert what a reader sees; returns counts for the caller's own checks."""
    from playwright.sync_api import sync_playwright

    executable = require_browser()
    found = {}
    with sync_playwright() as p:
        browser = _launch(p, executable)
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(path.resolve().as_uri(), wait_until="load")
                found = _check(page, width)
                if screenshot is not None and width == WIDTHS[0]:
                    page.screenshot(path=str(screenshot), full_page=False)
                page.close()
        finally:
            browser.close()
    return found


def _overflow(page) -> int:
    """How far the page is wider than its viewport (0: no horizontal scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def _check(page, width: int) -> dict:
    # 1. No raw HTML visible as text (an escaped table, a tag Markdown did not take as HTML).
    text = page.inner_text("body")
    raw = RAW_TAG.findall(text) + RAW_ENTITY.findall(text)
    assert not raw, f"raw HTML shown as text at width {width}: {raw[:5]}"

    # 2. Every image decoded.
    images = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])")
    bad = [alt for alt, complete, natural in images if not complete or natural <= 0]
    assert not bad, f"images not decoded: {bad}"

    # 3. The body never scrolls sideways, with every folded table open too.
    assert _overflow(page) <= 0, f"page overflows horizontally by {_overflow(page)} px at width {width}"
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert _overflow(page) <= 0, f"page overflows by {_overflow(page)} px at width {width} with tables unfolded"
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = false)")

    # 4. The table of contents links every section, and each link lands on its section.
    sections = page.evaluate("Array.from(document.querySelectorAll('h2[id]')).map(h => h.id)"
                             ".filter(id => id !== 'contents')")
    contents = page.locator("#contents ~ table").first
    links = contents.locator('a[href^="#"]').evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert sections, "no section headings with an id"
    assert [link[1:] for link in links] == sections, (links, sections)
    for link in links:
        page.evaluate("window.scrollTo(0, 0)")
        contents.locator(f'a[href="{link}"]').click()
        page.wait_for_function(f"location.hash === {link!r}")
        where = page.evaluate(f"""(() => {{
            const h = document.getElementById({link[1:]!r});
            const top = h.getBoundingClientRect().top;
            const atBottom = window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 1;
            return {{top, atBottom, height: window.innerHeight, text: h.textContent}};
        }})()""")
        landed = abs(where["top"]) <= 2 or (where["atBottom"] and 0 <= where["top"] < where["height"])
        assert landed, f"{link} did not land on its section: {where}"
        assert where["text"].startswith(f"{link[1:]}. "), where["text"]

    # 5. A way back: every section links to the contents, and the contents heading is where they point.
    back = page.evaluate("Array.from(document.querySelectorAll('a[href=\"#contents\"]')).length")
    assert back >= len(sections), f"{back} links back to the contents for {len(sections)} sections"
    return {"images": len(images), "sections": len(sections), "details": page.evaluate(
        "document.querySelectorAll('details').length")}
