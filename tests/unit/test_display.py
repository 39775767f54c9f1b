"""show(): a readable table whatever the values, as wide as the terminal (or ``width``) and
no wider: what fits shows whole, long values share the room left by narrow ones and are cut
with their size, nulls show as NULL, and middle columns are left out when even cut columns do
not fit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from tests.strategies import tables
from vane._display import MIN_CELL, cell, render, text_width
from vane.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def _box(text: str) -> list[str]:
    """The lines of the box (without the footer)."""
    lines = text.splitlines()
    return [line for line in lines if line[:1] in "┌│├└"]


def _at(line: str, chars: str) -> set[int]:
    """The places (in terminal cells) of ``chars`` in ``line``."""
    places, used = set(), 0
    for char in line:
        if char in chars:
            places.add(used)
        used += text_width(char)
    return places


def _cells(line: str) -> list[str]:
    return [part.strip() for part in line.strip("│").split("│")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    table=tables(max_columns=6, max_rows=4),
    width=st.integers(20, 240),
    names=st.lists(st.text(min_size=1, max_size=30), min_size=6, max_size=6, unique=True),
)
def test_the_box_is_never_wider_than_asked_and_stays_whole(table, width, names):
    table = table.rename_columns(names[: table.num_columns])
    text = render(table, width=width)
    box = _box(text)
    assert len(box) == table.num_rows + 5
    sizes = {text_width(line) for line in box}
    assert len(sizes) == 1 and sizes.pop() <= width  # every line as wide, none too wide
    borders = _at(box[0], "┌┬┐")
    for line in box[1:3] + box[4:-1]:
        assert borders <= _at(line, "│")  # no value breaks the frame
    if table.num_columns * (MIN_CELL + 3) + 1 <= width:
        assert "columns shown" not in text  # every column fits, cut to MIN_CELL at most


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(st.characters(categories=("L", "M", "N", "P", "S", "Zs")), max_size=300),
    width=st.integers(30, 200),  # room for both columns: none is left out
)
def test_text_shows_whole_when_it_fits_else_its_start_and_length(text, width):
    table = pa.table({"id": [1], "text": [text]})
    shown = _cells(_box(render(table, width=width))[4])[1]
    single = " ".join(text.split())
    room = width - len("│ BIGINT │  │")  # the id column takes its type's width
    tail = f"… ({len(text):,} chars)"
    if max(text_width(single), len("VARCHAR")) <= room:
        assert shown == single
    else:
        assert shown.endswith(tail if text_width(tail) < room else "…")
        assert single.startswith(shown.split("…")[0].rstrip())
        assert text_width(shown) >= room - 2  # the room is used (less a wide character, a space)


def test_long_text_gets_the_room_narrow_columns_leave():
    # The demo's search: text of a few dozen characters next to two numbers. It used to be cut
    # at 32 characters whatever the terminal's width.
    review = "An ordinary purchase: the manual is confusing and it broke after a week."
    table = pa.table({"text": [review], "reviews": [250], "similarity": [0.8123]})
    assert review in render(table, width=120)
    narrow = _box(render(table, width=60))
    assert max(text_width(line) for line in narrow) == 60  # all the room is used
    text, reviews, similarity = _cells(narrow[4])
    assert text.endswith(f"… ({len(review)} chars)") and review.startswith(text.split("…")[0])
    assert (reviews, similarity) == ("250", "0.8123")  # narrow columns keep their width


def test_long_values_share_the_room_evenly():
    table = pa.table({"a": ["x" * 500], "b": ["y" * 500], "n": [1]})
    a, b, n = _cells(_box(render(table, width=100))[4])
    assert abs(text_width(a) - text_width(b)) <= 1 and n == "1"
    assert a.endswith("(500 chars)") and b.endswith("(500 chars)")


def test_vectors_show_as_many_items_as_fit_and_their_length():
    table = pa.table({"id": [0], "v": pa.array([[0.5] * 384], pa.list_(pa.float32(), 384))})
    wide = _cells(_box(render(table, width=200))[4])[1]
    narrow = _cells(_box(render(table, width=50))[4])[1]
    assert wide.endswith(", ... 384 items]") and narrow.endswith(", ... 384 items]")
    assert wide.count("0.5") > narrow.count("0.5") >= 1


def test_show_prints_to_the_width_asked(capsys):
    rel = vane.sql(
        "SELECT range AS id, [range::FLOAT / 3 for x in range(384)]::FLOAT[384] AS embedding, "
        "repeat('long text ', 50) AS body, {'a': 1, 'b': 'x'} AS s, NULL::INT AS missing "
        "FROM range(3)"
    )
    rel.show(2, width=100)
    out = capsys.readouterr().out
    assert "... 384 items]" in out and "(500 chars)" in out
    assert "{a: 1, b: x}" in out and "NULL" in out and "FLOAT[384]" in out
    assert "first 2 rows" in out
    assert len(out.splitlines()) == 8  # the box: 3 header lines, 2 rows, 2 rules, the footer
    assert max(text_width(line) for line in out.splitlines()) == 100


@pytest.mark.parametrize("width", [0, 19, -5, 80.0, True, "80"])
def test_a_width_that_cannot_hold_a_table_is_refused(width):
    with pytest.raises(ConfigurationError, match=r"width=.* at least 20"):
        vane.range(3).show(width=width)


def test_show_fits_columns_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    vane.sql("SELECT repeat('word ', 100) AS text").show()
    lines = capsys.readouterr().out.splitlines()
    assert max(text_width(line) for line in lines) == 70


def test_show_outside_a_terminal_is_120_wide():
    code = "import vane; vane.sql(\"SELECT repeat('word ', 100) AS text\").show()"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert max(text_width(line) for line in out.splitlines()) == 120


def test_wide_characters_and_control_characters_keep_the_frame():
    table = pa.table({"text": ["日本語のテキスト" * 10, "red \x1b[31malert\x00 \u200b\n next"]})
    box = _box(render(table, width=40))
    assert {text_width(line) for line in box} == {40}
    assert "\\x1b[31malert\\x00" in box[5] and "\x1b" not in "".join(box)


def test_a_wide_table_leaves_out_middle_columns():
    wide = vane.sql("SELECT " + ", ".join(f"{i} AS column_{i}" for i in range(30))).to_arrow()
    text = render(wide, width=80, footer="1 row")
    assert "column_0" in text and "column_29" in text and "column_15" not in text
    assert "…" in text and max(text_width(line) for line in text.splitlines()) <= 80
    assert text.splitlines()[-1] == "1 row, 6 of 30 columns shown"


def test_a_column_wider_than_the_table_is_cut_to_fit():
    table = pa.table({"a_very_long_column_name_indeed": ["x" * 100], "b": [1]})
    box = _box(render(table, width=20))
    assert {text_width(line) for line in box} == {20}


def test_cells():
    assert cell(None) == "NULL"
    assert cell([1, 2]) == "[1, 2]"
    assert cell(list(range(100)), 24) == "[0, 1, 2, ... 100 items]"
    assert cell(list(range(100)), 10) == "[... 100…"
    assert cell(dict(zip("abcdef", range(6), strict=True)), 20) == "{a: 0, ... 6 fields}"
    assert cell(b"\x00" * 1000).endswith("(1,000 bytes)")
    assert cell(0.1234567891) == "0.123457"
    assert cell("a\n\tb  c") == "a b c"
