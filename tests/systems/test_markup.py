"""cs336_systems.report.markup: the writeup's Markdown subset to HTML."""

import html
import random
import string

import pytest

from cs336_systems.report.markup import inline, to_html


@pytest.mark.parametrize("level", range(1, 7))
def test_headings(level):
    assert to_html("#" * level + " A1. End-to-end benchmark") == \
        f'<h{level} id="a1-end-to-end-benchmark">A1. End-to-end benchmark</h{level}>'


def test_seven_hashes_is_not_a_heading():
    assert to_html("####### x") == "<p>####### x</p>"


def test_paragraphs_join_lines_and_split_on_blank_lines():
    words = ["".join(random.choices(string.ascii_lowercase, k=6)) for _ in range(4)]
    md = f"{words[0]}\n  {words[1]}\n\n\n{words[2]}\n   \n{words[3]}\n"
    assert to_html(md) == f"<p>{words[0]} {words[1]}</p>\n<p>{words[2]}</p>\n<p>{words[3]}</p>"


def test_list():
    assert to_html("- one\n- *two*\n  - three") == "<ul><li>one</li><li><em>two</em></li><li>three</li></ul>"


def test_inline_code_is_escaped_and_not_emphasised():
    assert inline("`a < b * c * d`") == "<code>a &lt; b * c * d</code>"
    assert inline("`**x**` and `<br>`") == "<code>**x**</code> and <code>&lt;br&gt;</code>"
    assert to_html("use `x<y && *p*` here") == "<p>use <code>x&lt;y &amp;&amp; *p*</code> here</p>"


def test_text_outside_code_is_escaped():
    assert to_html("a < b & c > d") == "<p>a &lt; b &amp; c &gt; d</p>"


def test_bold_and_italic():
    assert inline("**bold** and *it* and **b2**") == "<strong>bold</strong> and <em>it</em> and <strong>b2</strong>"
    assert inline("2 * 3 * 4") == "2 * 3 * 4"                    # spaced stars are not emphasis
    assert inline("a*b*c") == "a*b*c"                              # nor stars inside a word
    assert inline("*First 5 of 9 rows; all in `t.csv`.*") == "<em>First 5 of 9 rows; all in <code>t.csv</code>.</em>"


def test_raw_html_passes_through():
    block = '<table border="0">\n<tr><td>1 * 2 < 3</td></tr>\n</table>'
    figure = '<figure><img src="data:image/png;base64,AAAA" alt="x"></figure>'
    out = to_html(f"# T\n\n{block}\n\nafter *this*\n\n{figure}")
    assert out == f'<h1 id="t">T</h1>\n{block}\n<p>after <em>this</em></p>\n{figure}'


def test_random_plain_text_round_trips_through_unescape():
    alphabet = string.ascii_letters + string.digits + " .,;:!?&<>'\"()[]{}/\\=+-"
    text = "x" + "".join(random.choices(alphabet, k=200))
    out = to_html(text)
    assert out.startswith("<p>") and out.endswith("</p>")
    assert html.unescape(out[3:-4]) == " ".join(text.split("\n")).strip()
    assert "<" not in out[3:-4]


def test_empty_input():
    assert to_html("") == "" and to_html("\n\n  \n") == ""
