"""How a UDF step on Ray is fed by vane (vane/execution/ray/hosts.py, stream.py): the batches
cut from the blocks that reach the step, and the blocks a limit keeps. Run on Ray in
tests/conformance/test_runners.py; here, the cutting alone, a block standing in for its ref."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.integration.test_value_fidelity import _fine_times, assert_same_table
from tests.strategies import tables
from vane.execution.ray.hosts import batches, joined
from vane.execution.ray.stream import Blocks

# (rows before the block's first, the block's rows): a block Ray Data handed on in part
_BLOCKS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(_BLOCKS, st.integers(1, 10))
def test_batches_hold_each_row_once_in_order_and_the_steps_size_across_blocks(spec, size):
    blocks, expected, first = [], [], 0
    for skipped, rows in spec:
        table = pa.table({"id": list(range(first, first + skipped + rows))})
        blocks.append((table, skipped, rows))
        expected += list(range(first + skipped, first + skipped + rows))
        first += skipped + rows
    cut = list(batches(iter(blocks), size))
    rows_seen = []
    for batch in cut:
        table = joined(batch.pieces, batch.refs)
        assert table.num_rows == batch.rows
        assert len(batch.refs) == len({id(ref) for ref in batch.refs})  # each block sent once
        rows_seen += table["id"].to_pylist()
    assert rows_seen == expected
    # as Ray Data's map_batches and the local runner cut them: all full but the last
    assert all(batch.rows == size for batch in cut[:-1])
    assert not cut or 0 < cut[-1].rows <= size


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 9), max_size=6), st.integers(0, 40))
def test_a_limit_keeps_the_first_rows_and_reads_no_block_past_them(sizes, limit):
    read: list[int] = []
    closed: list[bool] = []

    def produce():
        try:
            for index, rows in enumerate(sizes):
                read.append(index)
                yield index, 0, rows
        finally:
            closed.append(True)

    kept = list(Blocks(produce).limited(limit))
    assert sum(rows for _, _, rows in kept) == min(limit, sum(sizes))
    # the blocks kept are a prefix, whole but the last, which is cut short
    assert [index for index, _, _ in kept] == list(range(len(kept)))
    assert all(rows == sizes[index] for index, _, rows in kept[:-1])
    # no block is read past the one that completes the limit, and what produces them is ended
    assert read == [index for index, _, _ in kept] or (limit == 0 and read == [])
    assert closed == [True] or not read


@pytest.mark.parametrize("module", ["hosts", "tally", "stream"])
def test_what_a_ray_actor_imports_to_run_a_step_is_what_the_step_runs(module):
    # Ray imports the module of an actor's class (RayHost, Tallies) in each new actor process,
    # and the module of a task's function: every action starts processes that import these.
    # DuckDB and the plan are the driver's: they cost a host 0.1 s more each start (fit.py, for
    # a constant, pulled them in once).
    code = (
        f"import sys, vane.execution.ray.{module}; "
        "print(sorted(m for m in ('duckdb', 'vane.plan', 'vane.backend', 'ray.data') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_rows=12), st.data())
def test_a_batch_cut_across_blocks_keeps_every_value_and_type(table, data):
    # Every generated Arrow type (tests/strategies.py: NaN, -0.0, timestamps of every unit and
    # zone, decimals, nested types), cut into blocks at drawn places and into batches of a
    # drawn size: what the hosts are sent, joined, is the table, value for value, type for type.
    assume(not any(_fine_times(column) for column in table.columns))  # (no Python form)
    cuts = sorted(data.draw(st.lists(st.integers(0, table.num_rows), max_size=4)))
    edges = [0, *cuts, table.num_rows]
    blocks = [(table, a, b - a) for a, b in itertools.pairwise(edges) if b > a]
    size = data.draw(st.integers(1, 7))
    sent = [joined(batch.pieces, batch.refs) for batch in batches(iter(blocks), size)]
    assert all(piece.schema == table.schema for piece in sent)
    assert_same_table(table, pa.concat_tables(sent) if sent else table.slice(0, 0))
