"""A stream with no batch size asked (``iter_batches()``, ``for row in rel``) hands each batch on
as it is produced: a UDF's first batch reaches the caller while its next is still running, for
every kind of UDF, through the steps above it, on both local backends and on Ray; with a batch
size, batches hold exactly that many rows.

Nothing here is timed. Each UDF holds every batch after its first until the test, having
received the first, opens a gate: a stream that waited to fill a batch would never give one.
A held batch gives up after ``HOLD_SECONDS`` and fails its step, so such a stream fails the test
instead of hanging it."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane import col

BACKENDS = ["thread", "subprocess_actor"]
B = 64  # rows per UDF batch
N = 20 * B  # rows per job: far fewer than the configured batch size (65,536)
HOLD_SECONDS = 120
SCHEMA = {"id": "BIGINT", "v": "BIGINT"}


def hold(first_id: int, gate: str) -> None:
    """For a batch after the first (its first id past the first batch's), wait until the test
    opens ``gate``: it does so only once the first batch has reached it."""
    if first_id < B:
        return
    deadline = time.monotonic() + HOLD_SECONDS  # a guard against hanging, never a measure
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError("the first batch never reached the caller: the stream held it")
        time.sleep(0.005)


def held_double(batch: pa.Table, gate: str) -> pa.Table:
    hold(batch["id"][0].as_py(), gate)
    return pa.table({"id": batch["id"], "v": pc.multiply(batch["id"], 2)})


class HeldDouble:
    def __init__(self, gate: str) -> None:
        self.gate = gate

    def __call__(self, batch: pa.Table) -> pa.Table:
        return held_double(batch, self.gate)


def held_row(row: dict[str, Any], gate: str) -> dict[str, Any]:
    hold(row["id"], gate)
    return {"id": row["id"], "v": row["id"] * 2}


def held_twice(ids: pa.Array, gate: str) -> pa.Array:
    hold(ids[0].as_py(), gate)
    return pc.multiply(ids, 2)


def with_udf(kind: str, backend: str, gate: str) -> vane.Relation:
    """``range(N)`` with ``v = 2 * id`` computed by a UDF of ``kind`` in batches of ``B``."""
    source = vane.range(N)
    options: dict[str, Any] = {"schema": SCHEMA, "batch_size": B, "execution_backend": backend}
    if kind == "map_batches":
        return source.map_batches(functools.partial(held_double, gate=gate), **options)
    if kind == "map_batches_class":
        return source.map_batches(HeldDouble, fn_constructor_kwargs={"gate": gate}, **options)
    if kind == "map":
        return source.map(functools.partial(held_row, gate=gate), **options)
    assert kind == "column_func"
    func = vane.func.batch(
        return_dtype="BIGINT", batch_size=B, use_process=backend == "subprocess_actor"
    )(held_twice)
    return source.with_column("v", func(col("id"), gate))


def first_then_rest(stream: Iterator[Any], gate: Path) -> tuple[Any, list[Any]]:
    """The stream's first item, taken while the UDF holds its second batch; then, the gate
    opened, every other item."""
    first = next(stream)
    gate.touch()
    return first, list(stream)


KINDS = ["map_batches", "map_batches_class", "map", "column_func"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_udfs_first_batch_reaches_the_caller_before_its_next_is_done(tmp_path, kind, backend):
    gate = tmp_path / "open"
    rel = with_udf(kind, backend, str(gate))
    first, rest = first_then_rest(iter(rel.iter_batches()), gate)
    assert 0 < first.num_rows <= B
    assert first.to_pylist() == [{"id": i, "v": 2 * i} for i in range(first.num_rows)]
    ids = [i for batch in [first, *rest] for i in batch["id"].to_pylist()]
    assert ids == list(range(N))
    assert all(batch.num_rows for batch in rest)


ABOVE: dict[str, Callable[[vane.Relation], vane.Relation]] = {
    "filter": lambda rel: rel.filter("v % 4 = 0"),
    "select": lambda rel: rel.select("id", "v + 1 AS w"),
    "with_column": lambda rel: rel.with_column("w", "v * v"),
    "limit": lambda rel: rel.limit(N - 10, offset=5),
    "filter_select_limit": lambda rel: rel.filter("v % 4 = 0").select("id").limit(N),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("above", list(ABOVE))
def test_the_steps_above_a_udf_hand_its_first_batch_on_at_once(tmp_path, above, backend):
    gate = tmp_path / "open"
    kind = "column_func" if above == "with_column" else "map_batches"
    rel = ABOVE[above](with_udf(kind, backend, str(gate)))
    expected = ABOVE[above](vane.range(N).with_column("v", "id * 2")).to_pylist()
    first, rest = first_then_rest(iter(rel.iter_batches()), gate)
    assert first.num_rows > 0
    assert [row for batch in [first, *rest] for row in batch.to_pylist()] == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_iterating_rows_gives_the_first_row_before_the_second_batch_is_done(tmp_path, backend):
    gate = tmp_path / "open"
    rel = with_udf("map_batches", backend, str(gate)).filter("v % 3 = 0")
    first, rest = first_then_rest(iter(rel), gate)
    assert first == {"id": 0, "v": 0}
    assert [first, *rest] == [{"id": i, "v": 2 * i} for i in range(N) if (2 * i) % 3 == 0]


@pytest.mark.parametrize("asked", [None, 8])
def test_a_udf_over_steps_over_a_udf_starts_on_the_first_batch_below(tmp_path, asked):
    """Between two UDF steps, DuckDB would read dozens of the first step's batches before the
    filter gave the second any row, whatever size the caller asks for. (On threads the second
    step has two batches in flight, both from the first step's first batch, before it asks for
    more input.)"""
    gate = tmp_path / "open"
    below = with_udf("map_batches", "thread", str(gate)).filter("v % 4 = 0")
    rel = below.map_batches(lambda t: t, schema=SCHEMA, batch_size=8)
    first, rest = first_then_rest(iter(rel.iter_batches(asked)), gate)
    assert first["id"].to_pylist()[0] == 0
    ids = [i for batch in [first, *rest] for i in batch["id"].to_pylist()]
    assert ids == list(range(0, N, 2))


class HeldEmbeddings:
    """vane.testing's server, holding each /embeddings request for texts past the first batch
    until ``opened`` is set (``held_too_long`` tells whether one gave up waiting)."""

    def __init__(self) -> None:
        from vane.testing import OpenAIServer

        outer = self
        self.opened = False
        self.held_too_long = False

        class Server(OpenAIServer):
            async def embeddings(self, request: Any) -> Any:
                texts = (await request.json())["input"]
                if any(int(text.split()[-1]) >= B for text in texts):
                    deadline = time.monotonic() + HOLD_SECONDS
                    while not outer.opened and time.monotonic() < deadline:
                        await asyncio.sleep(0.005)
                    outer.held_too_long = not outer.opened
                return await super().embeddings(request)

        self.server = Server().start()


def test_an_ai_functions_first_batch_reaches_the_caller_before_its_next_is_answered():
    pytest.importorskip("aiohttp")
    held = HeldEmbeddings()
    try:
        texts = vane.from_pydict({"id": list(range(N)), "text": [f"text {i}" for i in range(N)]})
        rel = texts.embed_text(
            "text",
            provider="openai",
            model="e",
            base_url=held.server.base_url,
            api_key="k",
            dimensions=4,
            batch_size=B,
        )
        stream = iter(rel.iter_batches())
        first = next(stream)
        assert not held.held_too_long, "the first batch came only once a held request gave up"
        held.opened = True
        rest = list(stream)
    finally:
        held.opened = True
        held.server.stop()
    assert 0 < first.num_rows <= B
    assert [i for b in [first, *rest] for i in b["id"].to_pylist()] == list(range(N))


class AsyncHeldDouble:
    """``held_double`` as an async UDF: a held batch keeps no other from running, whatever order
    Ray sends the blocks in (it sent the third block before the first, in a run of this test)."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    async def __call__(self, batch: pa.Table) -> pa.Table:
        if batch["id"][0].as_py() >= B:
            deadline = time.monotonic() + HOLD_SECONDS
            while not os.path.exists(self.gate):
                if time.monotonic() > deadline:
                    raise TimeoutError("the first batch never reached the caller: it was held")
                await asyncio.sleep(0.005)
        return pa.table({"id": batch["id"], "v": pc.multiply(batch["id"], 2)})


@pytest.mark.ray
@pytest.mark.timeout(HOLD_SECONDS * 3)
@pytest.mark.parametrize("asked", [None, 256])
def test_on_ray_the_first_block_reaches_the_caller_before_the_next_is_done(tmp_path, on_ray, asked):
    """Ray Data hands a UDF step's output on block by block (an in-memory table becomes 8
    blocks, see ``ray/lowering._split``; one UDF batch each), and vane asks for each as it
    comes: Ray Data's prefetch would wait for the next before handing one on."""
    gate = tmp_path / "open"
    rows = 8 * 1024
    source = vane.from_arrow(pa.table({"id": pa.array(range(rows), pa.int64())}))
    rel = source.map_batches(
        AsyncHeldDouble, fn_constructor_kwargs={"gate": str(gate)}, schema=SCHEMA, batch_size=1024
    ).filter("v % 4 = 0")
    first, rest = first_then_rest(iter(rel.iter_batches(asked)), gate)
    assert first["id"].to_pylist()[0] == 0
    assert [i for b in [first, *rest] for i in b["id"].to_pylist()] == list(range(0, rows, 2))


# ---- sizes ---------------------------------------------------------------------------------------


def double(batch: pa.Table) -> pa.Table:
    return pa.table({"id": batch["id"], "v": pc.multiply(batch["id"], 2)})


PIPELINES: dict[str, Callable[[vane.Relation, int, int], vane.Relation]] = {
    "udf": lambda rel, k, m: rel,
    "filter": lambda rel, k, m: rel.filter(f"v % {2 * k} = 0"),
    "limit": lambda rel, k, m: rel.limit(m, offset=k),
    "filter_limit_select": lambda rel, k, m: (
        rel.filter(f"v % {2 * k} = 0").limit(m).select("id", "v + 1 AS w")
    ),
}


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 600),
    udf_batch=st.integers(1, 100),
    asked=st.one_of(st.none(), st.integers(1, 200)),
    pipeline=st.sampled_from(list(PIPELINES)),
    k=st.integers(1, 5),
    m=st.integers(0, 400),
)
def test_batches_hold_exactly_the_size_asked_and_the_rows_of_the_plan(
    *, rows, udf_batch, asked, pipeline, k, m
):
    """With a size, every batch but the last holds exactly that many rows; without one, none is
    empty. Either way the rows are the plan's, as DuckDB computes them without streaming."""
    udf = vane.range(rows).map_batches(double, schema=SCHEMA, batch_size=udf_batch)
    rel = PIPELINES[pipeline](udf, k, m)
    batches = list(rel.iter_batches(asked))
    sizes = [b.num_rows for b in batches]
    assert all(sizes)
    if asked is not None:
        assert all(size == asked for size in sizes[:-1])
        assert all(size <= asked for size in sizes[-1:])
    assert [r for b in batches for r in b.to_pylist()] == rel.to_pylist()
