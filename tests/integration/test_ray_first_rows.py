"""On Ray, a UDF step's first rows reach the caller after one of its batches, not after a whole
Ray block (issue 31: a 20,000-row file's first 5,000 rows came at once, after 79 batches).

Nothing here is timed. The model logs each batch it answers to a file (Ray's actors are other
processes) and holds every batch but the first until the test, having received its first
batch, opens a gate: a stream that handed on only whole blocks would never give one. It is
async, so that a held batch keeps no other from running, whatever order Ray sends the blocks
in (Ray's actor may take a later block's call before the first's). A held batch gives up after
``HOLD_SECONDS`` and fails its step, so such a stream fails the test instead of hanging it."""

from __future__ import annotations

import asyncio
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


class Logged:
    """Holds each batch but the first until the gate opens; logs each answer's first id and
    rows."""

    def __init__(self, calls: str, gate: str) -> None:
        self.calls, self.gate = calls, gate

    async def __call__(self, batch: pa.Table) -> pa.Table:
        ids = batch["id"].to_pylist()
        if ids[0] != 0:
            deadline = time.monotonic() + HOLD_SECONDS  # a guard against hanging, not a measure
            while not os.path.exists(self.gate):
                if time.monotonic() > deadline:
                    raise TimeoutError("the first rows never reached the caller: a block held them")
                await asyncio.sleep(0.005)
        with open(self.calls, "a") as log:
            log.write(f"{ids[0]} {len(ids)}\n")
        return pa.table({"id": batch["id"], "score": pc.multiply(batch["id"], 3)})


def _calls(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


@pytest.mark.parametrize(
    ("above", "b", "batches"),
    [("udf", 64, 40), ("filter", 64, 40), ("udf", 100, 40), ("udf", 16, 300)],
)
def test_the_first_rows_of_a_file_come_after_one_batch_of_the_model(
    tmp_path, on_ray, above, b, batches
):
    """One parquet file of ``batches`` batches of ``b`` rows, one actor: the first batch reaches
    the caller when the model has answered that batch alone. Then every row comes, in order,
    each batch cut at multiples of ``b`` as locally (300 batches: past the small blocks, 127
    batches, and through blocks of at most 64)."""
    rows = b * batches
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), source)
    calls, gate = tmp_path / "calls.txt", tmp_path / "open"
    rel = vane.read_parquet(str(source)).map_batches(
        Logged,
        fn_constructor_kwargs={"calls": str(calls), "gate": str(gate)},
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=b,
        concurrency=1,
    )
    if above == "filter":
        rel = rel.filter("score % 2 = 0")
    stream = iter(rel.iter_batches())
    first = next(stream)
    answered = _calls(calls)
    gate.touch()
    rest = list(stream)
    assert first.num_rows > 0 and first["id"][0].as_py() == 0
    assert answered == [(0, b)]
    kept = [i for t in [first, *rest] for i in t["id"].to_pylist()]
    every = range(0, rows, 2) if above == "filter" else range(rows)
    assert kept == list(every)
    logged = _calls(calls)
    assert sorted(logged) == [(start, b) for start in range(0, rows, b)]
