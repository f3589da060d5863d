"""The writeup's rendering: Markdown to HTML (markdown-it-py), tables, the contents and missing sections."""

from pathlib import Path
import base64
import html
import json
import re

import pandas as pd
import pytest

from cs336_systems.report import writeup
from cs336_systems.report.writeup import (SECTIONS, Renderer, column_alignment, github_slug, header_words, section_sources,
                                          to_html)

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"


# --- Markdown to HTML -------------------------------------------------------------------------

def test_section_headings_are_anchored_by_their_id():
    out = to_html("## A1. End-to-end benchmark\n\n## C11. Optimizer state sharding: memory and time\n\n## Contents")
    assert '<h2 id="A1">A1. End-to-end benchmark</h2>' in out
    assert '<h2 id="C11">' in out and '<h2 id="contents">Contents</h2>' in out


def test_a_bullet_that_spans_lines_stays_one_item():
    out = to_html("- the first item\n  goes on here\n- the second")
    assert out.count("<li>") == 2 and "<p>" not in out
    assert re.search(r"<li>the first item\s+goes on here</li>", out)


def test_pipe_tables_render_and_text_is_escaped():
    out = to_html("| a | b |\n|:--|--:|\n| x < y | `<td>` |\n\nuse `x<y && *p*`; a < b & c")
    assert "<table>" in out and '<td style="text-align:right"><code>&lt;td&gt;</code></td>' in out
    assert '<td style="text-align:left">x &lt; y</td>' in out
    assert "<code>x&lt;y &amp;&amp; *p*</code>" in out and "a &lt; b &amp; c" in out


def test_raw_html_blocks_pass_through():
    block = '<details class="long-table"><summary>all</summary>\n<table>\n<tr><td>1 * 2 &lt; 3</td></tr>\n</table>\n</details>'
    figure = '<figure><img src="data:image/png;base64,AAAA" alt="x"><figcaption>x</figcaption></figure>'
    out = to_html(f"text *em*\n\n{block}\n\n{figure}\n\nafter")
    assert block in out and figure in out and "<em>em</em>" in out and "<p>after</p>" in out


def test_github_slugs():
    assert github_slug("A1. End-to-end benchmark") == "a1-end-to-end-benchmark"
    assert github_slug("B2. torch.compile") == "b2-torchcompile"
    assert github_slug("C11. Optimizer state sharding: memory and time") == "c11-optimizer-state-sharding-memory-and-time"


# --- tables -----------------------------------------------------------------------------------

@pytest.mark.parametrize("values, align", [
    ([1, 2, 3], "right"),
    ([1.5, float("nan")], "right"),
    (["21.41 ± 0.25", "OOM", "1,024.5 ± 3.1"], "right"),
    (["0.79 ± 0.13×", "", "2.20×"], "right"),
    (["12.3 %", "n/a", "-4e-05"], "right"),
    (["805.1–815.3", "0.01234–1.5e-05"], "right"),
    (["ampere_sgemm_128x64_tn", "void at::native::elementwise_kernel<4, 1>"], "left"),
    (["ok", "oom"], "left"),
    ([True, False], "left"),
    (["", ""], "left"),
])
def test_column_alignment(values, align):
    assert column_alignment(pd.Series(values)) == align


@pytest.mark.parametrize("alignment, parts", [
    (["left"] * 3 + ["right"] * 5, [[0, 1, 2, 3, 4, 5, 6, 7]]),
    (["left", "left", "right"] + ["right"] * 10, [[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 8, 9, 10, 11, 12]]),
    (["right"] * 9, [[0, 1, 2, 3, 4, 5, 6, 7], [0, 8]]),
    (["left"] * 5 + ["right"] * 6, [[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 8, 9, 10]])])
def test_a_wide_table_is_shown_as_parts_that_repeat_its_row_names(alignment, parts):
    assert writeup.column_parts(alignment) == parts


def test_a_wide_csv_renders_as_tables_of_at_most_eight_columns(tmp_path):
    columns = {"size": ["small", "xl"], "mode": ["forward", "train"], **{f"t{i}_ms": [1.5 * i, 2.5 * i] for i in range(11)}}
    pd.DataFrame(columns).to_csv(tmp_path / "table.csv", index=False)
    for fmt in ("md", "html"):
        text = Renderer(fmt, tmp_path / "w.md", TEMPLATES).table(tmp_path)
        headers = [line for line in text.splitlines() if line.startswith("| size")] if fmt == "md" else \
            re.findall(r"<thead>.*?</thead>", text, re.S)
        assert len(headers) == 2 and all(h.count("size") == 1 for h in headers)
        assert all((h.count("|") - 1 if fmt == "md" else len(re.findall(r"<th[ >]", h))) <= writeup.MAX_COLUMNS
                   for h in headers)
        assert "t10 (ms)" in text and "t0 (ms)" in text


def test_a_number_column_with_empty_cells_is_made_readable_too():
    """A CSV column of numbers with a row that has none reads as text; its numbers still show four digits."""
    frame = writeup.readable_frame(pd.DataFrame({"overhead_ms": ["11.137024", "", "-3.5"], "name": ["a", "b", "c"],
                                                 "count": ["12", "", "3"]}))
    assert list(frame["overhead_ms"]) == ["11.14", "", "-3.5"]
    assert list(frame["name"]) == ["a", "b", "c"] and list(frame["count"]) == ["12", "", "3"]


@pytest.mark.parametrize("column, words", [
    ("eager_forward_ms", "eager forward (ms)"), ("compiled_backward_peak_MiB", "compiled backward peak (MiB)"),
    ("busbw_GBps", "bus bandwidth (GB/s)"), ("overhead_pct", "overhead (%)"), ("size_mb", "size (MB)"),
    ("world_size", "world size"), ("step", "step"), ("ms", "ms"),
    ("sdpa-flash / ours", "sdpa-flash / ours"), ("step (ms)", "step (ms)"),
    ("kernel_us_per_kernel", "kernel (µs per kernel)"), ("per_flop_vs_final", "per flop vs final")])
def test_a_header_is_words_with_its_unit(column, words):
    """A table shows a CSV column's name as words with its unit; a header already in words stays."""
    assert header_words(column) == words


def _csv(tmp_path, rows: int):
    folder = tmp_path / "results" / "r" / "B5"
    folder.mkdir(parents=True)
    df = pd.DataFrame({"kernel": [f"k<{i}>" for i in range(rows)], "ms": [f"{i}.5 ± 0.1" for i in range(rows)],
                       "calls": range(rows)})
    df.to_csv(folder / "table.csv", index=False)
    return folder


def test_a_short_table_is_whole_aligned_and_escaped(tmp_path):
    folder = _csv(tmp_path, 3)
    page = Renderer("html", tmp_path / "writeup" / "r" / "w.html", TEMPLATES).table(folder)
    assert "<details" not in page and "\n\n" not in page           # one raw HTML block
    assert page.count("<tr>") == 4 and "k&lt;2&gt;" in page
    assert '<td style="text-align: right;">2.5 ± 0.1</td>' in page.replace("  ", "")
    md = Renderer("md", tmp_path / "writeup" / "r" / "w.md", TEMPLATES).table(folder)
    assert re.fullmatch(r"\|:-+\|-+:\|-+:\|", md.splitlines()[1]), md.splitlines()[1]


@pytest.mark.parametrize("value,shown", [(0.218432, "0.2184"), (1.10813, "1.108"), (392.375, "392.4"),
                                         (4.90384, "4.904"), (16960.0, "16960"), (999.97, "1000"), (1234.56, "1235"),
                                         (0.5, "0.5"), (1.7451512e-06, "1.745e-06"), (-12.3456, "-12.35"), (0.0, "0")])
def test_a_table_cell_shows_four_significant_digits(value, shown):
    assert writeup.readable(value) == shown


def test_the_writeup_table_rounds_floats_and_the_csv_keeps_them(tmp_path):
    pd.DataFrame({"impl": ["ours", "cudnn"], "ms": [4.90384, 4.42534], "ratio": [1.10813, 1.0],
                  "seq": [16384, 16384]}).to_csv(tmp_path / "table.csv", index=False)
    text = Renderer("md", tmp_path / "w.md", tmp_path).table(tmp_path)
    assert "| ours   | 4.904 |   1.108 | 16384 |" in text and "4.90384" not in text
    assert "4.90384" in (tmp_path / "table.csv").read_text()
    # a table whose subject is the digits (A3's sums: 0.999999 is not 1) keeps them
    assert "4.90384" in Renderer("md", tmp_path / "w.md", tmp_path).table(tmp_path, exact=True)


def test_a_long_table_folds_whole_and_links_its_csv(tmp_path):
    folder = _csv(tmp_path, writeup.FOLD_ROWS + 7)
    n = writeup.FOLD_ROWS + 7
    page = Renderer("html", tmp_path / "writeup" / "r" / "w.html", TEMPLATES).table(folder)
    assert page.startswith('<details class="long-table"><summary>') and "\n\n" not in page
    assert page.count("<tr>") == n + 1                                # every row, nothing cut
    data = re.search(r'href="data:text/csv;base64,([^"]+)"', page).group(1)
    assert base64.b64decode(data) == (folder / "table.csv").read_bytes()
    md = Renderer("md", tmp_path / "writeup" / "r" / "w.md", TEMPLATES).table(folder)
    assert md.startswith("<details><summary>") and md.count("\n| k<") == n
    assert "[table.csv](../../results/r/B5/table.csv)" in md


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_a_view_of_a_wide_table_shows_its_columns_in_order_and_says_what_it_leaves_out(tmp_path, fmt):
    folder = _csv(tmp_path, 3)
    out = tmp_path / "writeup" / "r" / f"w.{fmt}"
    text = Renderer(fmt, out, TEMPLATES).table(folder, columns=["calls", "kernel"])
    header = text.splitlines()[0] if fmt == "md" else re.search(r"<tr>(.*?)</tr>", text, re.S).group(1)
    assert re.sub(r"<[^>]+>|\|", " ", header).split() == ["calls", "kernel"]
    assert "2 of the 3 columns of" in text
    if fmt == "md":
        assert "[table.csv](../../results/r/B5/table.csv)" in text
    else:
        assert 'href="data:text/csv;base64,' in text
    # the whole table says nothing of the kind
    assert "columns of" not in Renderer(fmt, out, TEMPLATES).table(folder)


def test_a_view_naming_a_column_the_table_lacks_says_which_and_what_it_has(tmp_path):
    folder = _csv(tmp_path, 3)
    with pytest.raises(ValueError, match=r"has no column speed \(it has kernel, ms, calls\)"):
        Renderer("md", tmp_path / "w.md", TEMPLATES).table(folder, columns=["kernel", "speed"])


# --- the contents and missing sections --------------------------------------------------------

def _summary(tmp_path, run, ident, gpus=("NVIDIA H100",), counts=(1,), commits=("abc1234567",)):
    path = tmp_path / "results" / run / ident / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": {
        "gpus": list(gpus), "gpu_counts": list(counts), "hosts": ["h"], "commits": list(commits), "dirty": False,
        "torch": ["2"], "first_utc": "2026-11-22T01:00:00+00:00", "last_utc": "2026-11-23T01:00:00+00:00",
        "dates": "2026-11-22 to 2026-11-23", "sittings": [],
        "records": 3, "statuses": {"ok": 2, "oom": 1, "skipped": 0, "error": 0}}}))
    return path


def test_missing_sections_say_why(tmp_path):
    summaries = {"A2": _summary(tmp_path, "h100", "A2"), "B2": _summary(tmp_path, "h100", "B2")}
    _summary(tmp_path, "h200", "A1", counts=(1,))
    _summary(tmp_path, "h200", "C3", counts=(2,))
    _summary(tmp_path, "smoke", "A3", gpus=("CPU only",), counts=(0,))
    (tmp_path / "writeup" / "h200").mkdir(parents=True)
    (tmp_path / "writeup" / "h200" / "writeup.html").write_text("")
    sources = section_sources("h100", summaries, ["A2", "B2a"], {"A1": 1, "C3": 2, "A3": 1})
    assert sources["C3"]["missing"] == ("needs 2 GPUs; this run's jobs had 1 "
                                        "(measure it on a 2-GPU machine with `sections=A2,B2a,C3`)")
    assert sources["A1"]["missing"] == "not measured in this run: rebuild with `sections=A2,B2a,A1`"
    assert [o["run"] for o in sources["C3"]["elsewhere"]] == ["h200"]
    assert sources["A3"]["elsewhere"] == []                          # a smoke run is no substitute
    assert sources["B2"]["parts"] == ["a"] and sources["A2"]["parts"] == []

    r = Renderer("html", tmp_path / "writeup" / "h100" / "writeup.html", TEMPLATES)
    cell = r.source_cell("h100", sources["C3"])
    assert cell.startswith("**not built**: needs 2 GPUs")
    assert "run `h200` has it ([its writeup](../h200/writeup.html#C3))" in cell
    assert r.source_cell("h100", sources["A2"]) == ("run `h100` · NVIDIA H100 · commit `abc1234567` · "
                                                     "2026-11-22 to 2026-11-23 · 3 records (1 oom)")
    assert r.source_cell("h100", sources["B2"]).endswith(" · only part (a)")
    assert "· NVIDIA H100 ×2/4 ·" in r.source_cell("h100", {"provenance": dict(sources["A2"]["provenance"],
                                                                            gpu_counts=[1, 2, 4])})
    md = Renderer("md", tmp_path / "writeup" / "h100" / "writeup.md", TEMPLATES)
    assert "run `h200` has it" in md.source_cell("h100", sources["C3"])   # no writeup.md there: no link
    assert "](" not in md.source_cell("h100", sources["C3"])
    body = r.section("C3", None, sources["C3"])
    assert body.startswith("## C3. Naive DDP benchmark\n\n*Not built yet: needs 2 GPUs;")
    assert body.rstrip().endswith("[↑ Contents](#contents)")


def test_a_run_without_gpu_jobs_counts_the_machines_gpus(tmp_path):
    """A run whose only record is a CPU job's (C9's closed form; 0 GPUs on a CPU) counts what a job
    gets on the rendering machine, not the CPU job's 0: a chosen section says what it needs; one not
    chosen is not measured, whatever it needs; a rebuild hint names each section once."""
    summaries = {"C9": _summary(tmp_path, "check", "C9", gpus=("CPU only",), counts=(0,))}
    chosen = ["C3", "C9"]
    sources = section_sources("check", summaries, chosen, {"A1": 1, "C3": 2}, gpus_here=1)
    assert sources["C3"]["missing"] == ("needs 2 GPUs; this run's jobs had 1 "
                                        "(measure it on a 2-GPU machine with `sections=C3,C9`)")
    assert sources["A1"]["missing"] == "not measured in this run: rebuild with `sections=C3,C9,A1`"
    # On a machine without GPUs the records decide: two-GPU records keep the C sections' text.
    summaries["A2"] = _summary(tmp_path, "check", "A2", counts=(1, 2))
    assert section_sources("check", summaries, ["A2", *chosen], {"C12": 4})["C12"]["missing"].startswith(
        "needs 4 GPUs; this run's jobs had 2 ")


def test_a_run_with_every_section_says_nothing_is_missing(tmp_path, monkeypatch):
    summaries = {ident: _summary(tmp_path, "all", ident, counts=(2,)) for ident in SECTIONS}
    sources = section_sources("all", summaries, None, {"C3": 2})
    assert all("provenance" in s for s in sources.values())
    monkeypatch.setattr(Renderer, "section", lambda self, ident, path, source=None: f"## {ident}. {SECTIONS[ident]}\n")
    for fmt in ("md", "html"):
        text = Renderer(fmt, tmp_path / "writeup" / "all" / f"w.{fmt}", TEMPLATES).document("all", "full", summaries, sources)
        assert "not built" not in text.lower() and "Not built yet: ." not in text
        assert f"{len(SECTIONS)} of {len(SECTIONS)} sections have numbers, all from run `all`" in text
        # the contents (a section's answer, its provenance where it renders none) and, folded, each one's provenance
        answers = [line for line in text.splitlines() if re.match(r"\| \[[A-E]\d+\. ", line)]
        provenance = [line for line in text.splitlines() if re.match(r"\| \[[A-E]\d+\]\(", line)]
        assert len(answers) == len(provenance) == len(SECTIONS)
        assert all("run `all` · NVIDIA H100 ×2 · commit `abc1234567`" in row for row in provenance)
    html_rows = Renderer("html", tmp_path / "w.html", TEMPLATES).document("all", "full", summaries, sources)
    assert "| [A1. End-to-end benchmark](#A1) |" in html_rows


def test_the_page_is_one_file(tmp_path):
    from cs336_systems.accounting import study
    from cs336_systems.report import c9

    out = tmp_path / "results" / "r" / "C9"                 # a section with tables and a figure
    assert study.main(["--out", str(out / "records" / "accounting.json")]) == 0
    assert c9.main(["--record", str(out / "records" / "accounting.json"), "--out-dir", str(out)]) == 0
    summaries = [str(out / "summary.json")]
    page = tmp_path / "writeup" / "r" / "writeup.html"
    assert writeup.main(["--templates", str(TEMPLATES), "--run", "r", "--preset", "smoke", "--summaries", *summaries, "--md", str(page.with_suffix(".md")),
                         "--html", str(page)]) == 0
    text = page.read_text()
    assert not re.search(r"<link\b|@import|url\(|<script", text)
    assert all(s.startswith("data:") for s in re.findall(r'src="([^"]*)"', text))
    assert all(h.startswith(("#", "data:")) for h in re.findall(r'href="([^"]*)"', html.unescape(text)))


@pytest.mark.parametrize("spans", [None, {}, {"forward": 4096}, {"forward": 2048, "backward": 8192}])
def test_the_ran_table_says_split_launches_with_or_without_spans(tmp_path, spans):
    """B3 and B4 call ran_tables without B5's split spans; records that ran split launches (the
    H200's checks do) must still render, and the spans given are the ones said."""
    facts = [{"fact": "splits", "label": "split launches", "values": ["split"], "source": "the records"},
             {"fact": "order", "label": "causal tile order", "values": ["the longest causal tiles issued first"],
              "source": "the records"}]
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    macro = env.get_template("sections/_flash.md.j2").module.ran_tables
    ran = {"facts": facts, "tiles": [], "tree": None, "split": True}
    text = str(macro(ran, ["dtype", "d"]) if spans is None else macro(ran, ["dtype", "d"], SP=spans))
    assert "| split launches | a tile's work over several programs, then a combine kernel" in text
    assert "causal tile order | the longest causal tiles issued first" in text
    for key, said in (("forward", "the forward's keys up to N = "), ("backward", "the backward's tiles up to N = ")):
        if spans and key in spans:
            assert f"{said}{spans[key]}" in text
        else:
            assert said not in text


def test_records_measured_in_several_sittings_say_so_in_the_run_line(tmp_path):
    """The committed h200 run's sections were measured on three lent machines in one day (11:35–12:01,
    13:34–13:59, 17:44–18:05 UTC); the run line named one date."""
    from cs336_systems.records import make_record
    from cs336_systems.report.common import run_provenance

    times = ["2026-11-27T11:35:00+00:00", "2026-11-27T12:01:00+00:00", "2026-11-27T13:34:00+00:00",
             "2026-11-27T13:59:00+00:00", "2026-11-27T17:44:00+00:00", "2026-11-27T18:05:00+00:00"]
    records = []
    for t in times:
        r = make_record("A1", {}, "ok", {})
        r["provenance"]["utc"] = t
        records.append(r)
    p = run_provenance(records)
    assert p.dates == "2026-11-27" and [s.from_[11:16] for s in p.sittings] == ["11:35", "13:34", "17:44"]
    line = Renderer("md", tmp_path / "w.md", TEMPLATES).env.from_string(
        '{% from "sections/_run.md.j2" import run_line %}{{ run_line(p) }}').render(p=p)
    assert ("2026-11-27, in 3 sittings more than half an hour apart (2026-11-27 11:35–12:01, 2026-11-27 13:34–13:59, "
            "2026-11-27 17:44–18:05 UTC)") in line
    one = run_provenance(records[:2])
    assert one.sittings == [] and "sittings" not in Renderer("md", tmp_path / "w.md", TEMPLATES).env.from_string(
        '{% from "sections/_run.md.j2" import run_line %}{{ run_line(p) }}').render(p=one)
    assert run_provenance(records[:1] + [dict(records[-1], provenance=dict(records[-1]["provenance"],
                                                                              utc="2026-11-29T01:00:00+00:00"))]).dates \
        == "2026-11-27 to 2026-11-29"


def test_the_us_filter_writes_milliseconds_as_microseconds_with_the_unit(tmp_path):
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    us = env.from_string("{{ v | us }} / {{ v | us(2) }} / {{ none | us }}")
    assert us.render(v=0.022683) == "22.7 µs / 22.68 µs / n/a"
    assert env.from_string("{{ v | us(0) }}").render(v=1.5) == "1,500 µs"


def test_the_gb_and_tflop_filters_write_decimal_units(tmp_path):
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    assert env.from_string("{{ v | gb }} / {{ v | gb(0) }}").render(v=2_345_678_901) == "2.35 GB / 2 GB"
    assert env.from_string("{{ v | tflop }} / {{ w | tflop(1) }}").render(v=1.2345e12, w=12_000_000_000_000) == \
        "1.234 TFLOP / 12.0 TFLOP"


def test_the_sci_and_billion_filters_write_a_constant_as_prose_does(tmp_path):
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    sci = env.from_string("{{ v | sci }}")
    assert [sci.render(v=v) for v in (4.59e14, 1.8e11, 9.96e10, -2.5e-3, 7.0, 0.0)] == [
        "4.6·10¹⁴", "1.8·10¹¹", "1.0·10¹¹", "-2.5·10⁻³", "7.0·10⁰", "0.0·10⁰"]
    assert env.from_string("{{ v | sci(2) }} / {{ none | sci }}").render(v=123456.0) == "1.23·10⁵ / n/a"
    assert env.from_string("{{ v | billion }} / {{ v | billion(2) }}").render(v=6_996_000_000) == \
        "7.0 billion / 7.00 billion"


def test_the_setting_filter_writes_a_setting_as_it_was_given(tmp_path):
    setting = Renderer("md", tmp_path / "w.md", TEMPLATES).env.from_string("{{ v | setting }}")
    assert [setting.render(v=v) for v in (10000.0, 1000, 0.5, 2.0, 0.125, None)] == [
        "10,000", "1,000", "0.5", "2", "0.125", "n/a"]


def test_the_span_filters_write_a_range_or_one_number_where_its_ends_read_alike(tmp_path):
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    span = env.from_string("{{ v | span }} / {{ v | span(1) }} / {{ v | pct_span }}")
    assert span.render(v=[0.42, 0.11, 0.3]) == "0 / 0.1–0.4 / 11 %–42 %"
    assert span.render(v=(3.04, 2.96)) == "3 / 3.0 / 296 %–304 %"
    assert env.from_string("{{ v | span }}").render(v=[1200.0, 980.4]) == "980–1,200"


def test_the_binary_size_filter_writes_memory_in_the_largest_binary_unit_it_reaches(tmp_path):
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    size = env.from_string("{{ v | binary_size }}")
    assert size.render(v=3 * 1024 ** 3 // 2) == "1.50 GiB"
    assert size.render(v=12 * 1024 ** 2) == "12.0 MiB"
    assert size.render(v=512) == "0.5 KiB"
    given = env.from_string("{{ v | binary_size('GiB') }} | {{ w | binary_size('MiB') }}")     # amounts in other units
    assert given.render(v=0.25, w=2048) == "256.0 MiB | 2.00 GiB"


def test_the_and_join_filter_lists_names_as_a_sentence_does(tmp_path):
    env = Renderer("md", tmp_path / "w.md", TEMPLATES).env
    join = env.from_string("{{ xs | and_join }} / {{ xs | and_join(suffix=\"'s\") }} / {{ xs | and_join(names) }}")
    names = {"a": "alpha", "b": "beta", "c": "gamma"}
    assert join.render(xs=["a", "b", "c"], names=names) == "a, b and c / a's, b's and c's / alpha, beta and gamma"
    assert join.render(xs=["a", "b"], names=names) == "a and b / a's and b's / alpha and beta"
    assert join.render(xs=["c"], names=names) == "c / c's / gamma"
    assert join.render(xs=[], names=names) == " /  / "
