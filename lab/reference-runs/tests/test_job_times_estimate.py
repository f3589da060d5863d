"""The one-GPU cost estimate reads every input it names and adds up its own rows."""
import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "job-times" / "estimate.py"


def test_the_estimate_prints_rows_that_add_up_to_its_total(capsys):
    spec = importlib.util.spec_from_file_location("estimate", SCRIPT)
    estimate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(estimate)
    estimate.main()
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("|") for line in lines if line.startswith("| ") and not line.startswith("| deliverable")]
    body, total = rows[:-1], rows[-1]
    assert len(body) == 13 and "all" in total[1]
    for column in (3, 4):
        numbers = [float(r[column]) for r in body]
        assert all(n > 0 for n in numbers)
        # each row and the total are rounded to a tenth of a minute
        assert abs(float(re.sub(r"\*", "", total[column])) - sum(numbers)) <= 0.05 * (len(body) + 1)
    # keeping bytecode never makes a deliverable dearer
    assert all(float(r[4]) <= float(r[3]) for r in body)
