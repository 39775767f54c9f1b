"""What a map_batches / map / flat_map function is given and may answer with, as Ray Data and
Daft users write them: partials and fn_args, generators (sync and async, functions and
methods), pandas and numpy batches, and on_error="null" keeping the keys of failing rows. Each
runs on a thread and in a worker process."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pyarrow as pa
import pytest

import vane
from vane.errors import ConfigurationError, SchemaMismatchError

BACKENDS = ["thread", "subprocess_actor"]


def add(batch: pa.Table, amount: int, *, times: int = 1) -> dict:
    return {"id": batch["id"], "v": [x * times + amount for x in batch["id"].to_pylist()]}


class Offset:
    def __init__(self, offset: int, scale: int = 1) -> None:
        self.offset = offset
        self.scale = scale

    def __call__(self, batch: pa.Table, extra: int = 0) -> dict:
        ids = batch["id"].to_pylist()
        return {"id": ids, "v": [i * self.scale + self.offset + extra for i in ids]}


SCHEMA = {"id": "BIGINT", "v": "BIGINT"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_partials_and_fn_args_bind_arguments(backend):
    expected = [{"id": i, "v": i * 3 + 1} for i in range(5)]
    run = functools.partial(vane.range(5).map_batches, schema=SCHEMA, execution_backend=backend)
    assert run(functools.partial(add, amount=1, times=3)).to_pylist() == expected
    assert run(add, fn_args=(1,), fn_kwargs={"times": 3}).to_pylist() == expected
    assert run(functools.partial(add, times=3), fn_args=(1,)).to_pylist() == expected
    # a partial of a class binds constructor arguments, in front of the step's own
    assert run(functools.partial(Offset, 1), fn_constructor_kwargs={"scale": 3}).to_pylist() == (
        expected
    )
    assert run(Offset, fn_constructor_args=(1, 3), fn_kwargs={"extra": 1}).to_pylist() == [
        {"id": i, "v": i * 3 + 2} for i in range(5)
    ]


def test_row_functions_take_partials_and_fn_args():
    def shift(row: dict, by: int) -> dict:
        return {"id": row["id"], "v": row["id"] + by}

    out = vane.range(3).map(functools.partial(shift, by=5), schema=SCHEMA)
    assert out.to_pylist() == vane.range(3).map(shift, schema=SCHEMA, fn_args=(5,)).to_pylist()
    assert out.to_pylist()[2] == {"id": 2, "v": 7}


@pytest.mark.parametrize(
    ("fn", "kwargs", "match"),
    [
        (Offset, {}, r"Offset\(\.\.\.\) cannot take the arguments given: missing a required"),
        (Offset, {"fn_constructor_args": (1, 2, 3)}, "too many positional arguments"),
        (Offset, {"fn_constructor_args": (1,), "fn_kwargs": {"extr": 1}}, "no argument .extr."),
        (add, {}, r"add cannot take .*missing a required argument: 'amount'"),
        (add, {"fn_args": (1, 2)}, "too many positional arguments"),
        (functools.partial(add, amount=1), {"fn_args": (2,)}, r"too many positional.*amount.*= 1"),
        (add, {"fn_args": 1}, "fn_args must be a tuple"),
    ],
)
def test_arguments_are_checked_against_the_signatures_when_the_step_is_built(fn, kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        vane.range(3).map_batches(fn, schema=SCHEMA, **kwargs)


def test_an_instance_names_its_class_and_the_fix():
    for instance in (Offset(1), functools.partial(Offset(1))):
        with pytest.raises(ConfigurationError) as info:
            vane.range(3).map_batches(instance, schema=SCHEMA)
        message = str(info.value)
        assert "instance of Offset" in message and "fn_constructor_args" in message
        assert "partial" not in message


def test_max_concurrency_per_actor_on_a_synchronous_udf_is_an_error():
    with pytest.raises(ConfigurationError, match="Offset is synchronous"):
        vane.range(3).map_batches(
            Offset, schema=SCHEMA, fn_constructor_args=(1,), max_concurrency_per_actor=4
        )


# ---- generators ------------------------------------------------------------------------------


def split_rows(batch: pa.Table):
    for i in range(batch.num_rows):
        yield batch.slice(i, 1)
    yield {"id": []}  # an empty batch is fine


async def async_split_rows(batch: pa.Table):
    for i in range(batch.num_rows):
        yield batch.slice(i, 1)


class SplitRows:
    def __init__(self, copies: int) -> None:
        self.copies = copies

    def __call__(self, batch: pa.Table):
        for _ in range(self.copies):
            yield {"id": batch["id"]}


class AsyncSplitRows:
    async def __call__(self, batch: pa.Table):
        yield {"id": batch["id"]}
        yield {"id": batch["id"]}


def repeat(row: dict):
    for k in range(row["id"]):
        yield {"id": row["id"], "k": k}


async def async_repeat(row: dict):
    for k in range(row["id"]):
        yield {"id": row["id"], "k": k}


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_generators_output_every_yielded_batch_in_order(backend):
    run = functools.partial(
        vane.range(10).map_batches, schema={"id": "BIGINT"}, batch_size=4, execution_backend=backend
    )
    ids = list(range(10))
    assert [r["id"] for r in run(split_rows).to_pylist()] == ids
    assert [r["id"] for r in run(async_split_rows).to_pylist()] == ids
    doubled = [r["id"] for r in run(SplitRows, fn_constructor_args=(2,)).to_pylist()]
    assert doubled == [0, 1, 2, 3] * 2 + [4, 5, 6, 7] * 2 + [8, 9] * 2
    assert run(AsyncSplitRows).count() == 20


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [repeat, async_repeat])
def test_flat_map_generators_output_every_yielded_row(backend, fn):
    out = vane.range(4).flat_map(
        fn, schema={"id": "BIGINT", "k": "BIGINT"}, execution_backend=backend
    )
    assert out.to_pylist() == [{"id": i, "k": k} for i in range(4) for k in range(i)]


def test_a_generator_yield_that_breaks_the_contract_is_an_error():
    def bad(batch):
        yield {"id": batch["id"]}
        yield {"id": batch["id"], "other": batch["id"]}

    with pytest.raises(SchemaMismatchError, match="other"):
        vane.range(3).map_batches(bad, schema={"id": "BIGINT"}).to_arrow()


def test_map_with_a_generator_points_to_flat_map():
    with pytest.raises(SchemaMismatchError, match="Use flat_map"):
        vane.range(3).map(repeat, schema={"id": "BIGINT", "k": "BIGINT"}).to_arrow()


def test_a_failing_generator_follows_on_error():
    def fails_late(batch):
        yield {"id": batch["id"]}
        if 5 in batch["id"].to_pylist():
            raise ValueError("late")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = vane.range(8).map_batches(
            fails_late, schema={"id": "BIGINT"}, batch_size=4, on_error="skip"
        )
        assert sorted(r["id"] for r in out.to_pylist()) == [0, 1, 2, 3, 4, 6, 7]


# ---- batch formats ---------------------------------------------------------------------------


def pandas_double(frame):
    assert type(frame).__name__ == "DataFrame"
    frame["v"] = frame["id"] * 2
    return frame[["id", "v"]]


def numpy_norms(batch: dict) -> dict:
    assert isinstance(batch["m"], np.ndarray) and batch["m"].shape[1:] == (2, 2)
    assert batch["text"].dtype == object
    return {"id": batch["id"], "trace": np.trace(batch["m"], axis1=1, axis2=2)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_pandas_and_numpy_batches(backend):
    out = vane.range(5).map_batches(
        pandas_double, schema=SCHEMA, batch_format="pandas", execution_backend=backend
    )
    assert out.to_pylist() == [{"id": i, "v": 2 * i} for i in range(5)]
    matrices = vane.from_arrow(
        pa.table(
            {
                "id": [0, 1],
                "text": ["a", "b"],
                "m": pa.array(
                    [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 0.0], [0.0, 5.0]]],
                    pa.list_(pa.list_(pa.float64(), 2), 2),
                ),
            }
        )
    )
    traces = matrices.map_batches(
        numpy_norms,
        schema={"id": "BIGINT", "trace": "DOUBLE"},
        batch_format="numpy",
        execution_backend=backend,
    )
    assert traces.to_pylist() == [{"id": 0, "trace": 5.0}, {"id": 1, "trace": 10.0}]


def test_numpy_batches_keep_nullable_and_variable_columns_as_objects():
    def look(batch):
        assert list(batch["tags"][0]) == ["x"] and batch["tags"][1] is None
        return {"n": [len(batch["tags"])]}

    rel = vane.from_pydict({"tags": [["x"], None]})
    assert rel.map_batches(look, schema={"n": "BIGINT"}, batch_format="numpy").to_pylist() == [
        {"n": 2}
    ]


def test_an_unknown_batch_format_is_an_error():
    with pytest.raises(ConfigurationError, match="batch_format='arrow' is not one of"):
        vane.range(3).map_batches(add, schema=SCHEMA, batch_format="arrow", fn_args=(1,))


# ---- on_error="null": every column the function returns is null ------------------------------


def picky(batch: pa.Table) -> dict:
    if 3 in batch["id"].to_pylist():
        raise ValueError("no threes")
    return {"id": batch["id"], "name": batch["name"], "v": batch["id"]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_error_null_never_passes_an_input_value_off_as_an_output(backend):
    """A function that returns a column named like an input column (an id, or a price it
    transforms in place) answers nothing for a failing row: the column is null there, never
    the input's value, which would read as a success."""
    rel = vane.range(6).select("id", "'n' || id AS name")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = rel.map_batches(
            picky,
            schema={"id": "BIGINT", "name": "VARCHAR", "v": "BIGINT"},
            on_error="null",
            batch_size=4,
            execution_backend=backend,
        ).to_pylist()
        rows = rel.map(
            lambda row: {"id": row["id"] * 100 // (row["id"] - 3)},
            schema={"id": "BIGINT"},
            on_error="null",
            execution_backend=backend,
        ).to_pylist()
        flat = rel.flat_map(
            lambda row: [{"id": row["id"] // (row["id"] - 3)}] * 2,
            schema={"id": "BIGINT"},
            on_error="null",
            error_column="why",
            execution_backend=backend,
        ).to_pylist()
    assert out[3] == {"id": None, "name": None, "v": None, "error": "ValueError: no threes"}
    assert [r["v"] for r in out] == [0, 1, 2, None, 4, 5]
    assert rows[3] == {"id": None, "error": "ZeroDivisionError: integer division or modulo by zero"}
    assert [r["id"] for r in rows if r["error"] is None] == [0, -50, -200, 400, 250]
    assert flat[6] == {"id": None, "why": "ZeroDivisionError: integer division or modulo by zero"}
    assert len(flat) == 11
