"""Every value arrives exactly, through every kind of UDF, every backend and the Parquet writer
and reader, or the action fails naming the column and the type.

Tables of generated Arrow types (tests/strategies.py: every width of integer and float, DECIMAL
up to 38 digits, timestamps of every unit and zone, nanosecond times, dictionaries, lists, fixed
-size lists, structs, maps, nulls at every depth) and edge values (NaN, +-inf, -0.0, the extremes
of each width) go through an identity function; what comes out must be what went in. "Exactly"
is checked on Python values with NaN equal to NaN and -0.0 apart from 0.0; a zoned timestamp
keeps its instant (DuckDB hands zoned timestamps back in UTC, which the docs say).

The one refusal: a TIME_NS value with a part finer than a microsecond has no Python, numpy or
pandas form, so the paths that hand Python values to the function fail naming the column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import vane
from tests.strategies import tables
from vane.errors import VaneError

# The examples are the same on every run (tests/conftest.py's profile); HYPOTHESIS_PROFILE=explore
# draws fresh ones, many more, to look for new failures.
_EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"
FAST = settings(
    max_examples=500 if _EXPLORE else 60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(FAST, max_examples=50 if _EXPLORE else 8)


def same(a: Any, b: Any) -> bool:
    """Python values equal exactly: NaN equals NaN, -0.0 is not 0.0, 1 is not True."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return (a.tzinfo is None) == (b.tzinfo is None) and a == b
    if type(a) is not type(b) and not (_number(a) and _number(b)):
        return False
    return bool(a == b)


def _number(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def assert_same_table(expected: pa.Table, got: pa.Table) -> None:
    assert got.column_names == expected.column_names
    for name in expected.column_names:
        want, have = expected.column(name).to_pylist(), got.column(name).to_pylist()
        assert len(want) == len(have), name
        for row, (w, h) in enumerate(zip(want, have, strict=True)):
            assert same(w, h), (
                f"column {name!r} ({expected.column(name).type}) row {row}: {w!r} became {h!r}"
            )


def _fine_times(array: pa.Array | pa.ChunkedArray) -> bool:
    """Whether a time of day with nanoseconds is anywhere inside ``array``."""
    t = array.type
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    for chunk in chunks:
        if pa.types.is_time64(t) and t.unit == "ns":
            ns = chunk.cast(pa.int64()).to_numpy(zero_copy_only=False)
            if np.any(np.nan_to_num(ns) % 1000 != 0):
                return True
        elif pa.types.is_struct(t):
            if any(_fine_times(chunk.field(i)) for i in range(t.num_fields)):
                return True
        elif pa.types.is_map(t):
            if _fine_times(chunk.keys) or _fine_times(chunk.items):
                return True
        elif t.num_fields == 1 and _fine_times(chunk.flatten()):
            return True
    return False


def identity(x: Any) -> Any:
    return x


def listed(batch: pa.Table) -> dict[str, list[Any]]:
    return {name: batch.column(name).to_pylist() for name in batch.column_names}


def one_row(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [row]


Path_ = Callable[[vane.Relation, str], vane.Relation]


def _func(rel: vane.Relation, backend: str, batch: bool) -> vane.Relation:
    use_process = backend != "thread"
    calls = []
    for name in rel.columns:
        kind = rel.schema.field(name).type
        decorate = vane.func.batch if batch else vane.func
        udf = decorate(return_dtype=kind, use_process=use_process)(identity)
        calls.append(udf(rel[name]).alias(name))
    return rel.select(*calls)


PATHS: dict[str, tuple[Path_, bool]] = {
    # name: (pipeline, whether the function is handed Python values)
    "map_batches": (
        lambda r, b: r.map_batches(identity, schema=r.schema, execution_backend=b),
        False,
    ),
    "map_batches-pandas": (
        lambda r, b: r.map_batches(
            identity, schema=r.schema, batch_format="pandas", execution_backend=b
        ),
        True,
    ),
    "map_batches-numpy": (
        lambda r, b: r.map_batches(
            identity, schema=r.schema, batch_format="numpy", execution_backend=b
        ),
        True,
    ),
    "map_batches-lists": (
        lambda r, b: r.map_batches(listed, schema=r.schema, execution_backend=b),
        False,
    ),
    "map": (lambda r, b: r.map(identity, schema=r.schema, execution_backend=b), True),
    "flat_map": (lambda r, b: r.flat_map(one_row, schema=r.schema, execution_backend=b), True),
    "func": (lambda r, b: _func(r, b, batch=False), True),
    "func.batch": (lambda r, b: _func(r, b, batch=True), False),
}


def _round_trip(table: pa.Table, path: str, backend: str) -> None:
    build, python = PATHS[path]
    rel = vane.from_arrow(table)
    source = rel.to_arrow()
    assert_same_table(table, source)  # the source itself: DuckDB keeps every value
    out = build(rel, backend)
    fine = any(_fine_times(table.column(n)) for n in table.column_names)
    if path == "map_batches-lists":
        assume(not fine)  # the function's own to_pylist() cuts them: not vane's to catch
    if python and fine:
        with pytest.raises(VaneError, match=r"nanoseconds.*TIME"):
            out.to_arrow()
        return
    assert_same_table(source, out.to_arrow())


@pytest.mark.parametrize("path", list(PATHS))
@FAST
@given(table=tables())
def test_every_value_round_trips_on_thread_actors(path, table):
    _round_trip(table, path, "thread")


@pytest.mark.parametrize("path", ["map_batches", "map_batches-numpy", "map", "func"])
@SLOW
@given(table=tables())
def test_every_value_round_trips_in_worker_processes(path, table):
    _round_trip(table, path, "subprocess_actor")


@pytest.mark.ray
@pytest.mark.parametrize("path", ["map_batches", "map"])
# on_ray only switches the runner for the test: the same for every example
@settings(SLOW, max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=tables())
def test_every_value_round_trips_on_ray(on_ray, path, table):
    _round_trip(table, path, "ray_actor")


@FAST
@given(table=tables())
def test_every_value_round_trips_through_parquet(tmp_path_factory, table):
    folder: Path = tmp_path_factory.mktemp("parquet")
    source = vane.from_arrow(table)
    source.write_parquet(str(folder / "out"))
    assert_same_table(source.to_arrow(), vane.read_parquet(str(folder / "out")).to_arrow())


def test_nan_and_null_stay_apart_in_every_output_form():
    """The reproduction of the issue, and its class: NaN in numpy, pandas, lists and nested
    lists stays NaN; only None (or a mask, pandas' NA) is null."""
    import pandas as pd

    r = vane.range(2)
    forms: dict[str, Callable[[pa.Table], Any]] = {
        "numpy": lambda b: {"v": np.full(b.num_rows, np.nan)},
        "list": lambda b: {"v": [math.nan] * b.num_rows},
        "pandas": lambda b: pd.DataFrame({"v": [math.nan] * b.num_rows}),
        "masked": lambda b: {"v": np.ma.MaskedArray([math.nan, 1.0], mask=[False, True])},
    }
    for name, fn in forms.items():
        out = r.map_batches(fn, schema={"v": "DOUBLE"})
        counted = out.aggregate("count(v) AS nv", "count(*) AS n").to_pylist()[0]
        assert counted == {"nv": 2 if name != "masked" else 1, "n": 2}, name
        assert math.isnan(out.to_pylist()[0]["v"]), name
    nested = r.map_batches(
        lambda b: {"v": [[math.nan, None]] * b.num_rows}, schema={"v": "DOUBLE[]"}
    ).to_pylist()
    assert math.isnan(nested[0]["v"][0]) and nested[0]["v"][1] is None


def test_a_nanosecond_timestamp_keeps_its_nanoseconds_through_python():
    ts = pa.array([1_000_000_000_123_456_789, None], pa.timestamp("ns"))
    rel = vane.from_arrow(pa.table({"ts": ts}))
    seen = []

    @vane.func(return_dtype="TIMESTAMP_NS")
    def keep(value: Any) -> Any:
        seen.append(value)
        return value

    assert rel.map(identity, schema=rel.schema).to_arrow().column("ts").combine_chunks() == ts
    assert rel.select(keep(rel["ts"]).alias("ts")).to_arrow().column("ts").combine_chunks() == ts
    assert seen[0].nanosecond == 789


def test_a_column_udf_returns_a_map_as_a_dict():
    @vane.func(return_dtype="MAP(VARCHAR, BIGINT)")
    def counts(text: str) -> dict[str, int]:
        return {word: len(word) for word in text.split()}

    rel = vane.from_pydict({"t": ["a bb", ""]})
    out = rel.select(counts(rel["t"]).alias("m")).to_arrow()
    assert out.column("m").to_pylist() == [[("a", 1), ("bb", 2)], []]


def test_an_enum_column_passes_through_an_identity():
    rel = vane.sql("SELECT x::ENUM('lo', 'hi') AS e FROM (VALUES ('hi'), ('lo'), (NULL)) t(x)")
    out = rel.map_batches(identity, schema=rel.schema).to_arrow()
    assert out.column("e").to_pylist() == ["hi", "lo", None]
    rows = rel.map(identity, schema=rel.schema).to_arrow()
    assert rows.column("e").to_pylist() == ["hi", "lo", None]


# ---- sources: what DuckDB would change is converted exactly or refused -------------------------

SOURCES: dict[str, Callable[[pa.Table], vane.Relation]] = {
    "from_arrow": vane.from_arrow,
    "stream": lambda t: vane.from_arrow(
        pa.RecordBatchReader.from_batches(t.schema, t.to_batches())
    ),
    "from_pydict": lambda t: vane.from_pydict({n: t.column(n) for n in t.column_names}),
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_types_duckdb_lacks_are_held_exactly_or_refused(source):
    make = SOURCES[source]
    half = pa.table({"h": pa.array([1.5, None, -0.0, 65504.0], pa.float16())})
    assert make(half).to_arrow().column("h").to_pylist() == [1.5, None, -0.0, 65504.0]
    wide = pa.table({"d": pa.array([decimal.Decimal("1.25")], pa.decimal256(20, 2))})
    assert make(wide).to_pylist() == [{"d": decimal.Decimal("1.25")}]
    # a duration is DuckDB's INTERVAL, and the relation's schema says so: a UDF step over it
    # gets what the schema promises
    spans = make(pa.table({"t": pa.array([5, None], pa.duration("s"))}))
    assert spans.schema.field("t").type == pa.month_day_nano_interval()
    out = spans.map_batches(identity, schema=spans.schema).to_arrow().column("t").to_pylist()
    assert out == [pa.MonthDayNano([0, 0, 5_000_000_000]), None]
    refused = {
        "more than 38 digits": pa.table({"d": pa.array([1], pa.decimal256(40, 0))}),
        "nanoseconds": pa.table({"t": pa.array([1], pa.duration("ns"))}),
        "292 years": pa.table({"t": pa.array([10**12], pa.duration("s"))}),
        "NUL": pa.table({"a\x00b": [1]}),
        "differ only in case": pa.table({"A": [1], "a": [2]}),
        "struct field": pa.table({"s": pa.array([{"": 1}], pa.struct([("", pa.int64())]))}),
    }
    for why, table in refused.items():
        # a stream's values are checked as DuckDB reads them, so its refusal comes through
        # DuckDB's scan: the same message, in an ExecutionError
        expected = VaneError if source == "stream" else vane.errors.SchemaError
        with pytest.raises(expected, match=why):
            make(table).to_arrow()


def test_pandas_nan_stays_nan_and_its_missing_markers_are_null():
    import pandas as pd

    frame = pd.DataFrame(
        {
            "f": [1.0, math.nan, -0.0],
            "text": ["a", math.nan, None],  # NaN among text can only mean missing
            "n": pd.array([1, None, 3], dtype="Int64"),
            "when": pd.to_datetime(
                ["2024-01-01", None, "2024-01-02 00:00:00.000000001"], format="ISO8601"
            ),
        }
    )
    rows = vane.from_pandas(frame).to_pylist()
    assert math.isnan(rows[1]["f"]) and math.copysign(1, rows[2]["f"]) == -1
    assert [r["text"] for r in rows] == ["a", None, None]
    assert [r["n"] for r in rows] == [1, None, 3]
    assert rows[1]["when"] is None and rows[2]["when"].nanosecond == 1


def _types_of(rel: vane.Relation) -> dict[str, str]:
    from vane.types import arrow_to_duckdb

    return {f.name: arrow_to_duckdb(f.type) for f in rel.schema}


@FAST
@given(table=tables(), data=st.data())
def test_every_value_round_trips_through_json_and_csv(tmp_path_factory, table, data):
    """Text formats keep every value when read back with the types they were written from (a
    CSV cannot hold nested or binary columns: write_csv refuses them, naming them)."""
    folder: Path = tmp_path_factory.mktemp("text")
    source = vane.from_arrow(table)
    expected = source.to_arrow()
    source.write_json(str(folder / "json"))
    back = vane.read_json(str(folder / "json"), types=_types_of(source)).to_arrow()
    assert_same_table(expected, back)
    unwritable = [
        f.name for f in source.schema if pa.types.is_nested(f.type) or pa.types.is_binary(f.type)
    ]
    if unwritable:
        with pytest.raises(vane.errors.ConfigurationError, match=repr(unwritable[0])):
            source.write_csv(str(folder / "csv"))
        return
    del data
    source.write_csv(str(folder / "csv"))
    back = vane.read_csv(str(folder / "csv"), types=_types_of(source)).to_arrow()
    assert_same_table(expected, back)
