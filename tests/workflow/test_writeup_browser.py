"""The smoke DAG's writeup in a real headless browser: the session's one smoke run (conftest.py),
not a second one. tests/writeup checks the same on a writeup rendered from synthetic records."""
import pytest

from cs336_systems.report.writeup import SECTIONS
from writeup.browser import check_page, require_browser


@pytest.mark.slow
def test_smoke_writeup_reads_right_in_a_browser(smoke, tmp_path):
    copy, proc, _ = smoke
    assert proc.returncode == 0, proc.stderr[-3000:]
    require_browser()
    page = copy / "writeup" / "smoke" / "writeup.html"
    found = check_page(page, screenshot=tmp_path / "smoke.png")
    assert found["sections"] == len(SECTIONS)
    assert found["images"] == page.read_text().count("<img ") > 10     # every figure there, and decoded
    text = page.read_text()
    assert "Not built yet" not in text and "not built" not in text       # the smoke run builds everything
