"""On Ray, a UDF step's first rows reach the caller after about one of its batches, not after a
whole Ray block (issue 31: a 20,000-row file's first 5,000 rows came at once, after 79 batches).

Nothing here is timed. The model logs each batch it is called with to a file (Ray's actors are
other processes) and holds every batch past the first ``FREE`` until the test, having received
its first batch, opens a gate: a stream that handed on only whole blocks would never give one.
A held batch gives up after ``HOLD_SECONDS`` and fails its step, so such a stream fails the test
instead of hanging it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import vane

HOLD_SECONDS = 60
pytestmark = [pytest.mark.ray, pytest.mark.timeout(HOLD_SECONDS * 4)]

B = 64  # rows per UDF batch
BATCHES = 40
FREE = 2  # batches the model answers before it waits for the gate


class Logged:
    """Logs each batch's first id and rows; holds each batch past the first ``FREE``."""

    def __init__(self, calls: str, gate: str) -> None:
        self.calls, self.gate = calls, gate

    def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        with open(self.calls, "a") as log:
            log.write(f"{ids[0]} {len(ids)}\n")
        if ids[0] >= FREE * B:
            deadline = time.monotonic() + HOLD_SECONDS  # a guard against hanging, not a measure
            while not os.path.exists(self.gate):
                if time.monotonic() > deadline:
                    raise TimeoutError("the first rows never reached the caller: a block held them")
                time.sleep(0.005)
        return pa.table({"id": batch["id"], "score": pc.multiply(batch["id"], 3)})


def _calls(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


@pytest.mark.parametrize("above", ["udf", "filter"])
def test_the_first_rows_of_a_file_come_after_a_few_batches_of_the_model(tmp_path, on_ray, above):
    """One parquet file of 40 batches, one actor: when the first batch reaches the caller, the
    model has been called at most ``FREE`` times (plus the calls Ray has already handed the
    actor, which wait at the gate). Then every row comes, in order, each batch cut at
    multiples of ``B`` as locally."""
    rows = B * BATCHES
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), source)
    calls, gate = tmp_path / "calls.txt", tmp_path / "open"
    rel = vane.read_parquet(str(source)).map_batches(
        Logged,
        fn_constructor_kwargs={"calls": str(calls), "gate": str(gate)},
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=B,
        concurrency=1,
    )
    if above == "filter":
        rel = rel.filter("score % 2 = 0")
    stream = iter(rel.iter_batches())
    first = next(stream)
    called = len(_calls(calls))
    gate.touch()
    rest = list(stream)
    assert first.num_rows > 0 and first["id"][0].as_py() == 0
    assert called <= FREE + 2  # the free batches, and the two calls an actor takes at once
    kept = [i for b in [first, *rest] for i in b["id"].to_pylist()]
    every = range(0, rows, 2) if above == "filter" else range(rows)
    assert kept == list(every)
    logged = _calls(calls)
    assert sorted(logged) == [(start, B) for start in range(0, rows, B)]
