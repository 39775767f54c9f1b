"""A file source's read tasks on Ray (``vane/execution/ray/blocks.py``): the first share is read
slow-start, in a block of one batch of the UDF step that reads it, then two, doubling, then the
rest, so that the step's first rows come after one batch (issue 31). Whatever the files, the
blocks together are the rows the whole read gives, in its order, and their sizes are the same
on every run (a resumable write finds its batches again by their contents).

The read tasks run here in this process, as a Ray worker runs them: no cluster is needed."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane.execution.ray.blocks import file_datasource, read_files, slow_start
from vane.plan.nodes import FileScan

pytest.importorskip("ray")


def _scan(folder: Path, sizes: list[int], kind: str) -> FileScan:
    start, paths = 0, []
    for i, rows in enumerate(sizes):
        table = pa.table({"id": pa.array(range(start, start + rows), pa.int64())})
        path = folder / f"part-{i}.{kind}"
        if kind == "parquet":
            pq.write_table(table, path)
        else:
            path.write_text("id\n" + "".join(f"{v}\n" for v in range(start, start + rows)))
        paths.append(str(path))
        start += rows
    if kind == "parquet":
        scan = vane.read_parquet(paths).plan
    else:  # (an empty file's column would be text)
        scan = vane.read_csv(paths, types={"id": "BIGINT"}).plan
    assert isinstance(scan, FileScan)
    return scan


def _small(first: int) -> list[int]:
    return [first << i for i in range(7)]  # 1 .. 64 batches


def _blocks(scan: FileScan, parallelism: int, first: int) -> list[pa.Table]:
    tasks = file_datasource(scan, first).get_read_tasks(parallelism)
    return [pa.table(block) for task in tasks for block in task()]


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9_000), min_size=1, max_size=3),
    parallelism=st.integers(1, 4),
    kind=st.sampled_from(["parquet", "csv"]),
    first=st.sampled_from([1, 64, 100]),
)
def test_the_blocks_hold_every_row_in_order_the_first_ones_small(sizes, parallelism, kind, first):
    with tempfile.TemporaryDirectory() as folder:
        scan = _scan(Path(folder), sizes, kind)
        blocks = _blocks(scan, parallelism, first)
        again = _blocks(scan, parallelism, first)
        whole = read_files(scan, scan.files)
    rows = [v for b in blocks for v in b["id"].to_pylist()]
    assert rows == whole["id"].to_pylist() == list(range(sum(sizes)))
    assert [b.num_rows for b in again] == [b.num_rows for b in blocks]  # the same cuts
    first_share = sum(sizes[: -(-len(sizes) // min(parallelism, len(sizes)))])
    small = _small(first)
    head = [b.num_rows for b in blocks[: len(small)]]
    assert head == [max(0, min(n, first_share - sum(small[:i]))) for i, n in enumerate(small)]


@given(first=st.integers(1, 10_000))
def test_the_slow_start_doubles_from_one_batch_then_reads_the_rest(first):
    parts, small = slow_start(first), _small(first)
    assert parts[:-1] == [(sum(small[:i]), n) for i, n in enumerate(small)]
    assert parts[-1] == (sum(small), None)
