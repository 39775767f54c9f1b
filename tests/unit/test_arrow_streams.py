"""``vane._arrow.gathered``: the batches of a stream handed on in groups, each group a batch and
those already in hand after it, never one read ahead to fill a group."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from vane._arrow import gathered, one_batch

batches_and_readiness = st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=30)


@given(batches_and_readiness, st.integers(1, 120))
def test_groups_take_only_batches_in_hand_and_read_nothing_ahead(stream, max_rows):
    read: list[int] = []  # indexes of the batches read so far

    def source():
        start = 0
        for i, (rows, _) in enumerate(stream):
            read.append(i)
            yield pa.record_batch({"x": list(range(start, start + rows))})
            start += rows

    def in_hand() -> bool:
        return stream[read[-1]][1]

    groups = []
    seen = 0  # batches read before this group
    for group in gathered(source(), in_hand, max_rows):
        taken, seen = read[seen:], len(read)
        while not stream[taken[0]][0]:  # empty batches read before the group's first: dropped
            taken.pop(0)
        rows = sum(b.num_rows for b in group)
        assert group and all(b.num_rows for b in group)
        # every batch it took but its last said the next was in hand, with rows still short
        assert all(stream[i][1] for i in taken[:-1])
        assert rows - group[-1].num_rows < max_rows
        # and the last batch read ended it (no batch read ahead): by filling it, by saying the
        # next is not in hand, or by being the stream's last
        assert rows >= max_rows or not stream[taken[-1]][1] or taken[-1] == len(stream) - 1
        groups.append(one_batch(group))
    values = [x for batch in groups for x in batch["x"].to_pylist()]
    assert values == list(range(sum(rows for rows, _ in stream)))
