"""C9's two steps (the closed forms into a record, the record into tables) and its writeup section,
in a temporary folder."""

from pathlib import Path
import csv
import json

import pytest

from cs336_systems.accounting import study
from cs336_systems.records import read_record
from cs336_systems.report import c9, writeup

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("c9")
    out = root / "C9"
    assert study.main(["--out", str(out / "records" / "accounting.json")]) == 0
    assert c9.main(["--record", str(out / "records" / "accounting.json"), "--out-dir", str(out)]) == 0
    md, html = root / "writeup.md", root / "writeup.html"
    assert writeup.main(["--templates", str(TEMPLATES), "--run", "t", "--preset", "smoke", "--summaries", str(out / "summary.json"),
                         "--md", str(md), "--html", str(html)]) == 0
    return out, md.read_text(), html.read_text()


def test_outputs_and_record(built):
    out, _, _ = built
    for name in ("table.csv", "table.md", "scaling.csv", "scaling.md", "scaling_grid.csv", "scaling.png", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    record = read_record(out / "records" / "accounting.json")
    assert record["id"] == "C9" and record["status"] == "ok"
    assert record["metrics"]["c9"]["a"]["h100s_for_state"] == 44
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["records"] == 1 and summary["provenance"]["statuses"]["ok"] == 1
    assert summary["b"]["n_fsdp_state_only"] == 38
    with open(out / "scaling.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 4             # clusters x models x strategies


def test_section_quotes_the_numbers(built):
    _, md, html = built
    section = md.split("## C9.")[1].split("## C10.")[0]
    assert "Not built yet" not in section
    for text in ("3,517.58 GB", "44 H100s", "17.55 MB per token", "N_FSDP = 46", "319.44 tokens", "20,444 tokens",
                 "arXiv:1910.02054", "scaling.png"):
        assert text in section, text
    assert "<h2>C9. 4D-parallelism accounting</h2>" in html or "C9. 4D-parallelism accounting" in html


@pytest.mark.parametrize("args, message", [
    (["--tokens", "-1"], "--tokens must be 0 or more"),
    (["--tokens", "20000"], "leaves no room"),
    (["--global-batch", "0"], "--global-batch must be 1 or more"),
])
def test_bad_arguments_exit_with_one_line(tmp_path, args, message):
    with pytest.raises(SystemExit) as exc:
        study.main(["--out", str(tmp_path / "out" / "accounting.json"), *args])
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_the_report_formats_the_record_and_computes_nothing(built, tmp_path):
    """A record whose numbers were changed comes out changed: the report reads them, it does not
    recompute them from the closed forms."""
    out, _, _ = built
    record = json.loads((out / "records" / "accounting.json").read_text())
    record["metrics"]["c9"]["a"]["h100s_for_state"] = 4321
    record["metrics"]["grid"] = record["metrics"]["grid"][:40]
    changed = tmp_path / "accounting.json"
    changed.write_text(json.dumps(record))
    assert c9.main(["--record", str(changed), "--out-dir", str(tmp_path / "C9")]) == 0
    assert "4,321 devices" in (tmp_path / "C9" / "table.csv").read_text()
    assert len((tmp_path / "C9" / "scaling_grid.csv").read_text().splitlines()) == 41
    assert json.loads((tmp_path / "C9" / "summary.json").read_text())["a"]["h100s_for_state"] == 4321


def test_each_scaling_panel_names_its_own_tp_degree(built, tmp_path, monkeypatch):
    """The FSDP+TP line uses a TP degree per (cluster, model); the legend is drawn once, so the
    degree is in each panel's title and not in the legend."""
    import pandas as pd

    out, _, _ = built
    grid = pd.read_csv(out / "scaling_grid.csv")
    kept = {}
    monkeypatch.setattr(c9, "save_figure", lambda fig, path: kept.setdefault("fig", fig))
    c9.plot_scaling(grid, tmp_path / "scaling.png")
    fsdp_tp = grid[grid["strategy"] == "FSDP+TP"]
    titles = [ax.get_title() for ax in kept["fig"].axes if ax.get_title()]
    assert len(titles) == len(fsdp_tp.groupby(["cluster", "model"]))
    for (cluster, model), part in fsdp_tp.groupby(["cluster", "model"]):
        (title,) = [t for t in titles if t.startswith(f"{model} — {cluster}")]
        degrees = sorted({int(d) for d in part["tp_degree"]})
        assert title.endswith(f"FSDP+TP at TP {', '.join(map(str, degrees))}"), title
    labels = [t.get_text() for ax in kept["fig"].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert labels and not any("(TP " in label and label[label.index("(TP ") + 4].isdigit() for label in labels)


def test_section_opens_with_its_answer(built):
    _, md, _ = built
    section = md.split("## C9.")[1].split("## C10.")[0]
    opening = section.split("\n\n")[2]        # after the heading and the run line
    for text in ("3,517.58 GB", "N_FSDP = 46", "319.44 tokens per device"):
        assert text in opening, text
    tricks = section.split("**(d)")[1].split("**Beyond")[0]
    assert "| trick |" in tricks and "\n- **" not in tricks
