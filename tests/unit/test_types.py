from __future__ import annotations

import pyarrow as pa
import pytest

from vane.errors import SchemaError
from vane.types import arrow_to_duckdb, duckdb_to_arrow, to_arrow_schema

CASES = [
    ("BIGINT", pa.int64()),
    ("INTEGER", pa.int32()),
    ("DOUBLE", pa.float64()),
    ("FLOAT", pa.float32()),
    ("BOOLEAN", pa.bool_()),
    ("VARCHAR", pa.string()),
    ("BLOB", pa.binary()),
    ("DATE", pa.date32()),
    ("TIMESTAMP", pa.timestamp("us")),
    ("FLOAT[]", pa.list_(pa.float32())),
    ("FLOAT[384]", pa.list_(pa.float32(), 384)),
    ("STRUCT(a VARCHAR, b DOUBLE)", pa.struct([("a", pa.string()), ("b", pa.float64())])),
    ("MAP(VARCHAR, INTEGER)", pa.map_(pa.string(), pa.int32())),
    ("DECIMAL(10,2)", pa.decimal128(10, 2)),
]


@pytest.mark.parametrize(("name", "arrow"), CASES)
def test_duckdb_names_map_to_arrow_and_back(name, arrow):
    got = duckdb_to_arrow(name)
    # Producers name list children differently ("l", "item", ""): compare with names cast away.
    assert pa.array([], got).cast(arrow).type == arrow
    assert got.id == arrow.id
    assert arrow_to_duckdb(got).replace(" ", "") == name.replace(" ", "")
    assert arrow_to_duckdb(arrow).replace(" ", "") == name.replace(" ", "")


def test_json_is_text():
    assert duckdb_to_arrow("JSON") == pa.string()


def test_type_names_are_case_insensitive():
    assert duckdb_to_arrow("bigint") == pa.int64()


@pytest.mark.parametrize("bad", ["FLAOT", "STRUCT(a)", "FLOAT[abc]", "BIGINT; DROP TABLE x", ""])
def test_invalid_name_is_an_error_that_quotes_it(bad):
    with pytest.raises(SchemaError) as info:
        duckdb_to_arrow(bad)
    assert repr(bad) in str(info.value) or "non-empty" in str(info.value)


def test_unknown_type_suggests_a_fix():
    with pytest.raises(SchemaError, match="FLAOT") as info:
        duckdb_to_arrow("FLAOT")
    assert "BIGINT" in str(info.value)  # the message lists names that work
    assert isinstance(info.value, ValueError)


def test_schema_spec_forms():
    expected = pa.schema([("id", pa.int64()), ("e", pa.list_(pa.float32(), 3))])
    assert to_arrow_schema({"id": "BIGINT", "e": "FLOAT[3]"}) == expected
    assert to_arrow_schema([("id", "BIGINT"), ("e", pa.list_(pa.float32(), 3))]) == expected
    assert to_arrow_schema(expected) is expected


def test_schema_spec_errors_name_the_column():
    with pytest.raises(SchemaError, match=r"column 'e'.*'FLAOT'"):
        to_arrow_schema({"id": "BIGINT", "e": "FLAOT"})
    with pytest.raises(SchemaError, match="dict"):
        to_arrow_schema("id BIGINT")
    with pytest.raises(SchemaError, match="empty"):
        to_arrow_schema({})
    with pytest.raises(SchemaError, match="pyarrow DataType"):
        to_arrow_schema({"id": int})
