"""The batch contract: what a UDF may return, and how it is checked against the schema."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal

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
    with pytest.raises(SchemaMismatchError, match=r"row 1 is 2.5: .*truncated"):
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


# ---- every cast is lossless or an error, whatever shape the values come in -------------------

UTC2 = dt.timezone(dt.timedelta(hours=2))
LOSSY = [
    ("BIGINT", [0.0, 1.7], "row 1 is 1.7"),
    ("INTEGER", [1, 2**40], "row 1 is 1099511627776"),
    ("UTINYINT", [1, -1], "row 1 is -1"),
    ("FLOAT", [1.0, 1e300], r"row 1 is 1e\+300: .*too large"),
    ("DATE", [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2, 13, 45)], "row 1 is"),
    ("TIMESTAMP", [dt.datetime(2024, 1, 1, 13, 45, tzinfo=UTC2)], "time zone"),
    ("TIMESTAMPTZ", [dt.datetime(2024, 1, 1, 13, 45)], "no time zone"),
    ("DECIMAL(10, 2)", [0.5, 0.125], "row 1 is 0.125: .*would become"),
    ("DOUBLE", [1, 2**60], "row 1 is 1152921504606846976"),
    ("BIGINT", [True, False], "BOOLEAN cannot become BIGINT"),
    ("DOUBLE[]", [[1.0], [2.0, 1e300]], None),
    ("FLOAT[]", [[1.0], [2.0, 1e300]], "row 1 is \\[2.0, 1e\\+300\\]: .*too large"),
    ("BIGINT[]", [[1, 2], [3, 4.5]], "row 1 is \\[3.0, 4.5\\]"),
    ("STRUCT(a BIGINT)", [{"a": 1}, {"a": 2.5}], "row 1 is \\{'a': 2.5\\}"),
    ("STRUCT(a BIGINT)", [{"a": 1, "b": 2}], "missing \\[\\], extra \\['b'\\]"),
    ("MAP(VARCHAR, INTEGER)", [[("k", 1)], [("k", 3.5)]], "row 1"),
]


def _shapes(values):
    """The same values as a UDF may return them: a list, an Arrow array, a numpy array."""
    yield "list", values
    with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError):
        yield "arrow", pa.array(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        yield "numpy", np.array(values)


@pytest.mark.parametrize(("type_name", "values", "error"), LOSSY)
def test_every_cast_is_lossless_or_an_error_naming_the_row(type_name, values, error):
    schema = to_arrow_schema({"v": type_name})
    for shape, data in _shapes(values):
        if error is None:
            assert conform({"v": data}, schema, WHERE).column("v").to_pylist() == values, shape
            continue
        with pytest.raises(SchemaMismatchError, match=error) as info:
            conform({"v": data}, schema, WHERE)
        assert "column 'v'" in str(info.value), shape


@pytest.mark.parametrize(
    ("type_name", "values", "expected"),
    [
        ("BIGINT", [0.0, 3.0], [0, 3]),
        ("DOUBLE", [1, 2**52], [1.0, float(2**52)]),
        ("FLOAT", [0.1], [pa.scalar(0.1, pa.float32()).as_py()]),  # rounding is allowed
        ("DECIMAL(10, 2)", [0.5, 0.25], [decimal.Decimal("0.50"), decimal.Decimal("0.25")]),
        ("DATE", [dt.datetime(2024, 1, 2)], [dt.date(2024, 1, 2)]),
        ("UBIGINT", [2**64 - 1], [2**64 - 1]),  # beyond int64: read with the declared type
        ("FLOAT[2]", [[1, 2], [3, 4]], [[1.0, 2.0], [3.0, 4.0]]),
        ("STRUCT(b DOUBLE, a BIGINT)", [{"a": 1, "b": 2}], [{"b": 2.0, "a": 1}]),
    ],
)
def test_casts_that_lose_nothing_pass(type_name, values, expected):
    schema = to_arrow_schema({"v": type_name})
    assert conform({"v": values}, schema, WHERE).column("v").to_pylist() == expected


def test_pandas_columns_follow_the_same_rules():
    pd = pytest.importorskip("pandas")
    schema = to_arrow_schema({"v": "BIGINT"})
    with pytest.raises(SchemaMismatchError, match=r"row 2 is 2\.5"):
        conform(pd.DataFrame({"v": [1.0, 2.0, 2.5]}), schema, WHERE)
    assert conform(pd.DataFrame({"v": [1.0, 2.0]}), schema, WHERE).column("v").to_pylist() == [
        1,
        2,
    ]


def test_a_wrong_fixed_size_says_the_length_and_shows_little_of_the_value():
    schema = to_arrow_schema({"embedding": "FLOAT[384]"})
    for data in ([[0.5] * 384, [0.5] * 383], np.full((2, 383), 0.5)):
        with pytest.raises(SchemaMismatchError) as info:
            conform({"embedding": data}, schema, WHERE)
        message = str(info.value)
        assert "length 383, expected 384" in message
        assert len(message) < 400


def test_messages_never_dump_long_values():
    schema = to_arrow_schema({"v": "BIGINT"})
    with pytest.raises(SchemaMismatchError) as info:
        conform({"v": [1, "x" * 100_000]}, schema, WHERE)
    assert "100,000 characters" in str(info.value) and len(str(info.value)) < 500


def test_tensors_of_two_or_more_dimensions_become_nested_fixed_size_lists():
    batch_of_matrices = np.arange(18, dtype=np.float64).reshape(2, 3, 3)
    fixed = to_arrow_schema({"m": "DOUBLE[3][3]"})
    table = conform({"m": batch_of_matrices}, fixed, WHERE)
    assert table.column("m").to_pylist()[1] == batch_of_matrices[1].tolist()
    per_row = [np.eye(3), np.ones((3, 3))]
    assert conform({"m": per_row}, fixed, WHERE).column("m").to_pylist()[0] == np.eye(3).tolist()
    ragged = to_arrow_schema({"m": "DOUBLE[][]"})
    mixed = [np.eye(2), np.ones((3, 3))]
    assert (
        conform({"m": mixed}, ragged, WHERE).column("m").to_pylist()[1] == np.ones((3, 3)).tolist()
    )
    with pytest.raises(SchemaMismatchError, match="length 2, expected 3"):
        conform({"m": np.zeros((2, 2, 2))}, fixed, WHERE)
