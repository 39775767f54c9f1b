"""One suite, every backend: the same pipelines must give the same rows on thread actors,
subprocess actors and subprocess tasks. A combination a backend cannot run by design (a class
on subprocess_task) must fail when the step is built, with the fix."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import vane
from vane.errors import ConfigurationError

BACKENDS = ["thread", "subprocess_actor", "subprocess_task"]


class Scale:
    def __init__(self, factor: int) -> None:
        self.factor = factor

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.table({"id": batch["id"], "v": pc.multiply(batch["id"], self.factor)})


class AsyncScale:
    async def __call__(self, batch: pa.Table) -> pa.Table:
        await asyncio.sleep(0.001)
        return pa.table({"id": batch["id"], "v": pc.multiply(batch["id"], 3)})


def double(batch: pa.Table) -> dict[str, object]:
    return {"id": batch["id"], "v": pc.multiply(batch["id"], 2)}


def fails_on_7(batch: pa.Table) -> pa.Table:
    if 7 in batch["id"].to_pylist():
        raise ValueError("seven")
    return pa.table({"id": batch["id"], "v": batch["id"]})


def square_row(row: dict) -> dict:
    return {"id": row["id"], "v": row["id"] ** 2}


def repeat_row(row: dict) -> list[dict]:
    return [{"id": row["id"], "v": k} for k in range(row["id"] % 3)]


async def _square(value: int) -> int:
    await asyncio.sleep(0)
    return value * value


def square_row_with_asyncio_run(row: dict) -> dict:
    # A plain function that runs its own event loop: it must not be called on the actor's.
    return {"id": row["id"], "v": asyncio.run(_square(row["id"]))}


def repeat_row_with_asyncio_run(row: dict) -> list[dict]:
    return [{"id": row["id"], "v": asyncio.run(_square(k))} for k in range(row["id"] % 3)]


def square_batch_with_asyncio_run(batch: pa.Table) -> pa.Table:
    async def squares() -> list[int]:
        return [await _square(i) for i in batch["id"].to_pylist()]

    return pa.table({"id": batch["id"], "v": asyncio.run(squares())})


SCHEMA = {"id": "BIGINT", "v": "BIGINT"}
N = 40


@dataclass(frozen=True)
class Case:
    build: Callable[[vane.Relation, str], vane.Relation]
    expected: list[dict]
    is_class: bool = False
    ordered: bool = True


CASES = {
    "class_with_constructor_args": Case(
        lambda r, b: r.map_batches(
            Scale, schema=SCHEMA, batch_size=6, execution_backend=b, fn_constructor_args=(5,)
        ),
        [{"id": i, "v": 5 * i} for i in range(N)],
        is_class=True,
    ),
    "function": Case(
        lambda r, b: r.map_batches(double, schema=SCHEMA, batch_size=7, execution_backend=b),
        [{"id": i, "v": 2 * i} for i in range(N)],
    ),
    "async_class": Case(
        lambda r, b: r.map_batches(AsyncScale, schema=SCHEMA, batch_size=5, execution_backend=b),
        [{"id": i, "v": 3 * i} for i in range(N)],
        is_class=True,
    ),
    "map_rows": Case(
        lambda r, b: r.map(square_row, schema=SCHEMA, execution_backend=b),
        [{"id": i, "v": i * i} for i in range(N)],
    ),
    "flat_map_rows": Case(
        lambda r, b: r.flat_map(repeat_row, schema=SCHEMA, execution_backend=b),
        [{"id": i, "v": k} for i in range(N) for k in range(i % 3)],
    ),
    "map_rows_calling_asyncio_run": Case(
        lambda r, b: r.map(square_row_with_asyncio_run, schema=SCHEMA, execution_backend=b),
        [{"id": i, "v": i * i} for i in range(N)],
    ),
    "flat_map_rows_calling_asyncio_run": Case(
        lambda r, b: r.flat_map(repeat_row_with_asyncio_run, schema=SCHEMA, execution_backend=b),
        [{"id": i, "v": k * k} for i in range(N) for k in range(i % 3)],
    ),
    "batch_function_calling_asyncio_run": Case(
        lambda r, b: r.map_batches(
            square_batch_with_asyncio_run, schema=SCHEMA, batch_size=8, execution_backend=b
        ),
        [{"id": i, "v": i * i} for i in range(N)],
    ),
    "on_error_skip": Case(
        lambda r, b: r.map_batches(
            fails_on_7, schema=SCHEMA, batch_size=8, execution_backend=b, on_error="skip"
        ),
        [{"id": i, "v": i} for i in range(N) if i != 7],
    ),
    "on_error_null": Case(
        lambda r, b: r.map_batches(
            fails_on_7, schema=SCHEMA, batch_size=8, execution_backend=b, on_error="null"
        ).filter("error IS NOT NULL"),
        [{"id": None, "v": None, "error": "ValueError: seven"}],
    ),
    "unordered_two_workers": Case(
        lambda r, b: r.map_batches(
            double,
            schema=SCHEMA,
            batch_size=3,
            execution_backend=b,
            concurrency=2,
            preserve_order=False,
        ),
        [{"id": i, "v": 2 * i} for i in range(N)],
        ordered=False,
    ),
    "sql_after_the_udf": Case(
        lambda r, b: (
            r.map_batches(double, schema=SCHEMA, batch_size=9, execution_backend=b)
            .filter("v % 4 = 0")
            .aggregate("count(*) AS n", "sum(v) AS total")
        ),
        [{"n": 20, "total": sum(2 * i for i in range(N) if (2 * i) % 4 == 0)}],
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_same_rows_on_every_backend(name, backend):
    case = CASES[name]
    source = vane.range(N)
    if case.is_class and backend == "subprocess_task":
        with pytest.raises(ConfigurationError, match="subprocess_actor"):
            case.build(source, backend)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # on_error cases warn by design
        rows = case.build(source, backend).to_pylist()
    if case.ordered:
        assert rows == case.expected
    else:
        assert sorted(rows, key=lambda r: r["id"]) == case.expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_and_read_back_on_every_backend(tmp_path, backend):
    out = vane.range(N).map_batches(double, schema=SCHEMA, batch_size=6, execution_backend=backend)
    result = out.write_parquet(tmp_path / "out", rows_per_file=15)
    assert (result.rows, result.files) == (N, 3)
    assert vane.read_parquet(tmp_path / "out").to_pylist() == CASES["function"].expected
