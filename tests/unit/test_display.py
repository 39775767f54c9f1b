"""show(): a readable table whatever the values: vectors and long text cut short with their
size, nulls as NULL, and middle columns left out when the table is wider than the terminal."""

from __future__ import annotations

import vane
from vane._display import cell, render


def test_long_values_are_cut_short_with_their_size(capsys):
    rel = vane.sql(
        "SELECT range AS id, [range::FLOAT / 3 for x in range(384)]::FLOAT[384] AS embedding, "
        "repeat('long text ', 50) AS body, {'a': 1, 'b': 'x'} AS s, NULL::INT AS missing "
        "FROM range(3)"
    )
    rel.show(2)
    out = capsys.readouterr().out
    assert "... 384 items]" in out and "(500 chars)" in out
    assert "{a: 1, b: x}" in out and "NULL" in out and "FLOAT[384]" in out
    assert "first 2 rows" in out
    assert len(out.splitlines()) == 8  # the box: 3 header lines, 2 rows, 2 rules, the footer
    assert max(len(line) for line in out.splitlines()) <= 120


def test_a_wide_table_leaves_out_middle_columns():
    wide = vane.sql("SELECT " + ", ".join(f"{i} AS column_{i}" for i in range(30))).to_arrow()
    text = render(wide, width=80)
    assert "column_0" in text and "column_29" in text and "column_15" not in text
    assert "…" in text and max(len(line) for line in text.splitlines()) <= 80


def test_cells():
    assert cell(None) == "NULL"
    assert cell([1, 2]) == "[1, 2]"
    assert cell(list(range(100))) == "[0, 1, 2, ... 100 items]"
    assert cell(b"\x00" * 1000).endswith("(1,000 bytes)")
    assert cell(0.1234567891) == "0.123457"
