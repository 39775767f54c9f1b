"""The output contract end to end: whatever a UDF returns (rows from map and flat_map, dicts of
lists, numpy or Arrow from map_batches, column UDF values), on every backend, a value that would
change is an error naming the column and the row, never silently different data."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

import vane
from vane import col
from vane.errors import SchemaMismatchError

BACKENDS = ["thread", "subprocess_actor"]


def plus_point_seven(row: dict) -> dict:
    return {"s": row["id"] + 0.7}


def float_batch(batch: pa.Table) -> dict:
    return {"s": [i + 0.5 for i in batch["id"].to_pylist()]}


def pairs(row: dict) -> list[dict]:
    return [{"s": row["id"]}, {"s": row["id"] + 0.25}]


def afternoon(row: dict) -> dict:
    return {"d": dt.datetime(2024, 1, 1, 13, 45)}


def aware(row: dict) -> dict:
    return {"t": dt.datetime(2024, 1, 1, 13, 45, tzinfo=dt.timezone(dt.timedelta(hours=2)))}


def huge(row: dict) -> dict:
    return {"x": 1e300}


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_floats_are_never_truncated_into_integers(backend):
    out = vane.range(3).map(plus_point_seven, schema={"s": "BIGINT"}, execution_backend=backend)
    with pytest.raises(SchemaMismatchError, match=r"column 's'.*row 0 is 0\.7"):
        out.to_arrow()
    batches = vane.range(3).map_batches(
        float_batch, schema={"s": "BIGINT"}, execution_backend=backend
    )
    with pytest.raises(SchemaMismatchError, match=r"row 0 is 0\.5"):
        batches.to_arrow()
    flat = vane.range(3).flat_map(pairs, schema={"s": "BIGINT"}, execution_backend=backend)
    with pytest.raises(SchemaMismatchError, match=r"row 1 is 0\.25"):
        flat.to_arrow()


@pytest.mark.parametrize(
    ("fn", "schema", "error"),
    [
        (afternoon, {"d": "DATE"}, r"row 0 is .*13, 45"),
        (aware, {"t": "TIMESTAMP"}, "time zone"),
        (huge, {"x": "FLOAT"}, "too large"),
    ],
)
def test_other_silent_losses_are_errors(fn, schema, error):
    with pytest.raises(SchemaMismatchError, match=error):
        vane.range(2).map(fn, schema=schema).to_arrow()


def test_column_udf_values_follow_the_contract():
    @vane.func
    def third(x: int) -> int:
        return x / 3  # type: ignore[return-value]

    with pytest.raises(SchemaMismatchError, match=r"row 1 is 0\.333"):
        vane.range(3).select(third(col("id"))).to_arrow()


def test_whole_floats_and_wider_types_still_pass():
    out = vane.range(3).map(lambda row: {"s": float(row["id"])}, schema={"s": "BIGINT"})
    assert out.to_pylist() == [{"s": 0}, {"s": 1}, {"s": 2}]


def test_a_tensor_per_row_is_stored_as_nested_fixed_size_lists():
    def matrices(batch: pa.Table) -> dict:
        ids = batch["id"].to_numpy()
        return {"id": ids, "m": np.stack([np.eye(3) * i for i in ids])}

    out = vane.range(4).map_batches(
        matrices, schema={"id": "BIGINT", "m": "DOUBLE[3][3]"}, execution_backend="subprocess_actor"
    )
    rows = out.to_pylist()
    assert rows[2]["m"] == (np.eye(3) * 2).tolist()
    assert out.schema.field("m").type == pa.list_(pa.list_(pa.float64(), 3), 3)


@pytest.mark.slow
def test_a_batch_with_more_than_two_gib_of_text_is_stored_in_pieces():
    piece = 800_000_000  # three of these overflow 32-bit string offsets

    def big(batch: pa.Table) -> dict:
        return {"id": batch["id"], "text": ["x" * piece] * batch.num_rows}

    out = vane.range(3).map_batches(big, schema={"id": "BIGINT", "text": "VARCHAR"}, batch_size=3)
    rows = out.select("id", "length(text) AS n").to_pylist()
    assert rows == [{"id": i, "n": piece} for i in range(3)]
