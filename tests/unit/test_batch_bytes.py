"""Cutting a table into runs of at most N bytes: every row kept, in order, each run under the
cap unless one row alone exceeds it, and row sizes exact for the types images and files use."""

from __future__ import annotations

import itertools

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from vane._arrow import row_nbytes, split_by_bytes

rows = st.lists(st.tuples(st.binary(max_size=40), st.text(max_size=10)), min_size=1, max_size=30)


@settings(max_examples=40)
@given(rows, st.integers(1, 120))
def test_runs_keep_every_row_in_order_under_the_cap(values, limit):
    table = pa.table(
        {
            "data": pa.array([b for b, _ in values], pa.binary()),
            "name": pa.array([t for _, t in values], pa.large_string()),
            "id": pa.array(range(len(values)), pa.int32()),
        }
    ).slice(1)
    sizes = [len(b) + len(t.encode()) + 4 for b, t in values][1:]
    assert list(row_nbytes(table)) == sizes
    runs = list(split_by_bytes(table, limit))
    assert pa.concat_tables(runs).equals(table) if runs else table.num_rows == 0
    for run in runs:
        assert run.num_rows == 1 or int(row_nbytes(run).sum()) <= limit
    # Greedy: no run could have taken the next row and stayed under the cap.
    for run, following in itertools.pairwise(runs):
        assert int(row_nbytes(run).sum()) + int(row_nbytes(following)[0]) > limit


def test_fixed_size_lists_and_structs_count_their_values():
    images = pa.array([[[1, 2], [3, 4]], None], pa.list_(pa.list_(pa.uint8(), 2), 2))
    refs = pa.array([{"url": "abc", "size": 3}, {"url": "", "size": 0}])
    assert list(row_nbytes(pa.table({"i": images, "f": refs}))) == [4 + 3 + 8, 4 + 0 + 8]
