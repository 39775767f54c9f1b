"""The batch contract: what a UDF may return, and how it is checked against the schema."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from vane.errors import SchemaMismatchError
from vane.types import to_arrow_schema
from vane.udf.batch_contract import castable, conform

SCHEMA = to_arrow_schema({"id": "BIGINT", "output": "VARCHAR"})
WHERE = "map_batches step `Model`"


@pytest.mark.parametrize(
    "result",
    [
        pa.table({"id": [1, 2], "output": ["a", "b"]}),
        pa.record_batch({"id": [1, 2], "output": ["a", "b"]}),
        {"id": [1, 2], "output": ["a", "b"]},
        {"id": np.array([1, 2]), "output": pa.array(["a", "b"])},
        pd.DataFrame({"id": [1, 2], "output": ["a", "b"]}),
        {"output": ["a", "b"], "id": [1, 2]},  # order is normalized
    ],
    ids=["table", "batch", "dict", "numpy+arrow", "pandas", "reordered"],
)
def test_accepted_shapes(result):
    assert conform(result, SCHEMA, WHERE).to_pylist() == [
        {"id": 1, "output": "a"},
        {"id": 2, "output": "b"},
    ]


def test_lossless_casts_are_applied():
    out = conform({"id": pa.array([1, 2], pa.int32()), "output": ["a", "b"]}, SCHEMA, WHERE)
    assert out.schema == SCHEMA
    vectors = to_arrow_schema({"v": "FLOAT[3]"})
    out = conform({"v": np.random.rand(2, 3)}, vectors, WHERE)  # float64 rows -> FLOAT[3]
    assert out.schema == vectors
    out = conform({"v": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]}, vectors, WHERE)
    assert out.column("v").to_pylist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_text_never_becomes_a_number():
    with pytest.raises(SchemaMismatchError) as info:
        conform({"id": ["1", "2"], "output": ["a", "b"]}, SCHEMA, WHERE)
    message = str(info.value)
    assert "column 'id'" in message and "BIGINT" in message and "Model" in message
    assert not castable(pa.string(), pa.int64())
    assert not castable(pa.int64(), pa.string())
    assert castable(pa.int32(), pa.int64())


def test_a_lossy_cast_names_the_first_bad_row():
    with pytest.raises(SchemaMismatchError, match=r"row 1 \(value 2.5\)"):
        conform({"id": pa.array([1.0, 2.5]), "output": ["a", "b"]}, SCHEMA, WHERE)
    sized = to_arrow_schema({"v": "FLOAT[2]"})
    with pytest.raises(SchemaMismatchError, match="row 1"):
        conform({"v": pa.array([[1.0, 2.0], [1.0, 2.0, 3.0]])}, sized, WHERE)


def test_missing_and_extra_columns():
    with pytest.raises(SchemaMismatchError, match=r"missing column\(s\) \['output'\]"):
        conform({"id": [1]}, SCHEMA, WHERE)
    with pytest.raises(SchemaMismatchError, match=r"column\(s\) \['extra'\] that the schema"):
        conform({"id": [1], "output": ["a"], "extra": [0]}, SCHEMA, WHERE)


def test_python_objects_arrow_cannot_store_name_column_and_row():
    class Opaque:
        pass

    with pytest.raises(SchemaMismatchError, match=r"column 'output'.*row 1 is .*Opaque"):
        conform({"id": [1, 2], "output": ["fine", Opaque()]}, SCHEMA, WHERE)


def test_wrong_return_type_and_ragged_columns():
    with pytest.raises(SchemaMismatchError, match="returned list"):
        conform([1, 2], SCHEMA, WHERE)
    with pytest.raises(SchemaMismatchError, match="different lengths"):
        conform({"id": [1, 2], "output": ["a"]}, SCHEMA, WHERE)
