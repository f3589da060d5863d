"""A writeup rendered from synthetic records (A1 with a table long enough to fold, A3, C9; the rest
missing with their reasons), opened in headless chromium. tests/workflow does the same with the
smoke DAG's writeup."""

from pathlib import Path
import random

import pytest
from a1_records import PHASES, heat

from cs336_systems.accounting import study
from cs336_systems.precision import accumulation
from cs336_systems.records import write_json_atomic
from cs336_systems.report import a1, a3, c9, writeup

from .browser import check_page, require_browser

pytestmark = pytest.mark.slow      # starting Chromium takes 6-10 s

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"

def a1_record(rng, size, context, mode):
    """An fp32 grid point alone in its heat: 3 rounds of one step (``a1_records.heat``)."""
    rounds = [{phase: [rng.uniform(1, 50)] for phase in PHASES[mode]} for _ in range(3)]
    (record,) = heat(size, context, mode, {"fp32": rounds}, batch=2,
                     oom=("fp32",) if (size, context, mode) == ("large", 128, "train-step") else ())
    return record


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    require_browser()
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("browser")
    results = root / "results" / "synthetic"
    paths = []
    for size in ("tiny", "small", "medium", "large"):
        for context in (16, 32, 64, 128):
            for mode in PHASES:
                paths.append(root / "records" / f"{size}_{context}_{mode}.json")
                write_json_atomic(paths[-1], a1_record(rng, size, context, mode))
    assert a1.main(["--records", *map(str, paths), "--out-dir", str(results / "A1")]) == 0
    a3_record = root / "a3.json"
    assert accumulation.main(["--terms", "1", "10", "100", "--out", str(a3_record)]) == 0
    assert a3.main(["--record", str(a3_record), "--out-dir", str(results / "A3")]) == 0
    c9_record = root / "c9.json"
    assert study.main(["--out", str(c9_record)]) == 0
    assert c9.main(["--record", str(c9_record), "--out-dir", str(results / "C9")]) == 0
    html = root / "writeup" / "synthetic" / "writeup.html"
    assert writeup.main(["--templates", str(TEMPLATES), "--run", "synthetic", "--preset", "smoke", "--sections", "A1,A3,C9",
                         "--gpus-needed", "C3=2", "C12=2",
                         "--summaries", *(str(results / i / "summary.json") for i in ("A1", "A3", "C9")),
                         "--md", str(html.with_suffix(".md")), "--html", str(html)]) == 0
    return html


def test_the_page_reads_right_in_a_browser(page):
    found = check_page(page, screenshot=page.with_suffix(".png"))
    assert found["sections"] == len(writeup.SECTIONS)
    assert found["images"] == 3                     # A1, A3 and C9 have one figure each here
    assert found["details"] >= 1                    # A1's 48 rows fold
    assert page.with_suffix(".png").stat().st_size > 10_000


def test_missing_sections_and_sources_are_in_the_header(page):
    text = page.read_text()
    assert "needs 2 GPUs; this run&#x27;s jobs had 0" in text or "needs 2 GPUs; this run's jobs had 0" in text
    assert "not measured in this run: rebuild with <code>sections=A1,A3,C9,A2</code>" in text
    assert "Not built yet: ." not in text
