"""Python values as SQL constants: each Python type has one SQL type whatever the value, and the
value comes back exactly (docs/expressions.md has the table)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from vane import col, lit
from vane.errors import PlanError

# Each example builds and runs a small plan; a few hundred per type find the edges (-0.0, NaN,
# 17-digit floats, the ends of BIGINT, leap days, microseconds) without slowing the suite.
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def constant(value: object) -> tuple[pa.DataType, object]:
    """The type and the value of ``lit(value)`` selected over a one-row relation."""
    table = vane.from_pydict({"a": [1]}).select(lit(value).alias("x")).to_arrow()
    return table.schema.field("x").type, table.column("x").to_pylist()[0]


def same_float(a: float, b: float) -> bool:
    """Equal to the bit, NaN aside (its payload is not a value): -0.0 is not 0.0."""
    if math.isnan(a):
        return math.isnan(b)
    return struct.pack("<d", a) == struct.pack("<d", b)


@EXAMPLES
@given(st.floats())
def test_a_float_is_a_double_whatever_its_value(value):
    kind, out = constant(value)
    assert kind == pa.float64()
    assert same_float(out, value)


@EXAMPLES
@given(st.floats(), st.integers(-(2**31), 2**31))
def test_a_column_times_a_float_stays_double(factor, n):
    rel = vane.from_pydict({"n": pa.array([n], pa.int64()), "f": pa.array([1.5], pa.float32())})
    table = rel.select(
        (col("n") * factor).alias("by_int"),
        (col("f") + factor).alias("by_float"),
        (factor - col("n")).alias("reflected"),
        col("n").fill_null(factor).alias("filled"),
    ).to_arrow()
    assert set(table.schema.types) == {pa.float64()}
    (row,) = table.to_pylist()
    assert same_float(row["by_int"], n * factor)
    assert same_float(row["reflected"], factor - n)


@EXAMPLES
@given(st.integers(-(2**63), 2**63 - 1))
def test_an_int_is_a_bigint_whatever_its_value(value):
    assert constant(value) == (pa.int64(), value)


@EXAMPLES
@given(st.one_of(st.integers(max_value=-(2**63) - 1), st.integers(min_value=2**63)))
def test_an_int_beyond_bigint_is_refused_saying_what_to_pass(value):
    with pytest.raises(PlanError, match=r"does not fit BIGINT.*decimal\.Decimal"):
        lit(value)
    with pytest.raises(PlanError, match="does not fit BIGINT"):
        col("a") == value  # noqa: B015 (the comparison builds the literal)


@EXAMPLES
@given(st.text())
def test_a_str_is_a_varchar(value):
    assert constant(value) == (pa.string(), value)


def test_a_str_no_sql_text_can_hold_is_refused():
    with pytest.raises(PlanError, match="lone surrogate"):
        lit("a\udc80b")


@EXAMPLES
@given(st.binary())
def test_bytes_are_a_blob(value):
    assert constant(value) == (pa.binary(), value)


@pytest.mark.parametrize(("value", "kind"), [(True, pa.bool_()), (None, pa.null())])
def test_bools_and_none(value, kind):
    assert constant(value) == (kind, value)


def _digits(value: decimal.Decimal) -> int:
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    return max(len(digits) + max(0, exponent), -exponent)


@EXAMPLES
@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_a_decimal_keeps_its_own_digits_and_scale(value):
    if _digits(value) > 38:
        with pytest.raises(PlanError, match="more than 38 digits"):
            lit(value)
        return
    kind, out = constant(value)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    scale = max(0, -exponent)
    assert kind == pa.decimal128(max(_digits(value), 1), scale)
    assert out == value and out.as_tuple().exponent == min(exponent, 0)


@pytest.mark.parametrize("value", ["NaN", "sNaN", "Infinity", "-Infinity"])
def test_a_decimal_that_is_not_a_number_is_refused(value):
    with pytest.raises(PlanError, match="float"):
        lit(decimal.Decimal(value))


@EXAMPLES
@given(st.dates())
def test_a_date_is_a_date(value):
    assert constant(value) == (pa.date32(), value)


@EXAMPLES
@given(st.datetimes())
def test_a_naive_datetime_is_a_timestamp(value):
    assert constant(value) == (pa.timestamp("us"), value)


# Any offset Python allows, to the microsecond (DuckDB's parser reads none finer than seconds).
_OFFSETS = st.timedeltas(
    min_value=-dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999),
    max_value=dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999),
).map(dt.timezone)


@EXAMPLES
@given(
    st.datetimes(min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31)),
    _OFFSETS,
)
def test_an_aware_datetime_is_a_timestamptz_of_the_same_instant(naive, zone):
    value = naive.replace(tzinfo=zone)
    kind, out = constant(value)
    assert pa.types.is_timestamp(kind) and kind.unit == "us" and kind.tz is not None
    assert out == value and out.utcoffset() == dt.timedelta(0)


def test_an_aware_datetime_that_leaves_pythons_years_in_utc_is_refused():
    early = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    with pytest.raises(PlanError, match="in UTC"):
        lit(early)


@EXAMPLES
@given(st.times())
def test_a_time_is_a_time(value):
    assert constant(value) == (pa.time64("us"), value)


def test_a_time_with_a_zone_is_refused():
    with pytest.raises(PlanError, match="has a time zone"):
        lit(dt.time(12, tzinfo=dt.timezone.utc))


_LONGEST = dt.timedelta(microseconds=(2**63 - 1) // 1000)


@EXAMPLES
@given(st.timedeltas(min_value=-_LONGEST, max_value=_LONGEST))
def test_a_timedelta_is_an_interval_of_its_microseconds(value):
    kind, out = constant(value)
    assert kind == pa.month_day_nano_interval()
    assert tuple(out) == (0, 0, value // dt.timedelta(microseconds=1) * 1000)


@EXAMPLES
@given(st.timedeltas(min_value=_LONGEST + dt.timedelta(microseconds=1)), st.booleans())
def test_a_timedelta_arrow_cannot_hold_is_refused(value, negative):
    with pytest.raises(PlanError, match="292 years"):
        lit(-value if negative else value)


_SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(),
    st.dates(),
)


@EXAMPLES
@given(st.one_of(*(st.lists(items, min_size=1, max_size=5) for items in _SCALARS.branches)))
def test_a_list_is_a_list_of_its_items_type(items):
    kind, out = constant(items)
    assert kind == pa.list_(constant(items[0])[0])
    if isinstance(items[0], float):
        assert all(same_float(a, b) for a, b in zip(out, items, strict=True))
    else:
        assert out == items


_KEYS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1)


@EXAMPLES
@given(
    st.dictionaries(_KEYS, _SCALARS, min_size=1, max_size=4).filter(
        lambda d: len({k.lower() for k in d}) == len(d)  # DuckDB's field names ignore case
    )
)
def test_a_dict_is_a_struct_of_its_values_types(value):
    kind, out = constant(value)
    assert pa.types.is_struct(kind)
    assert [kind.field(i).name for i in range(kind.num_fields)] == list(value)
    for key, item in value.items():
        assert kind.field(key).type == constant(item)[0]
        assert same_float(out[key], item) if isinstance(item, float) else out[key] == item


@pytest.mark.parametrize(
    ("key", "says"),
    [("", "fields of a STRUCT"), ("a\x00b", "NUL"), (1, "strings"), ("\ud800", "surrogate")],
)
def test_a_dict_key_that_cannot_name_a_field_is_refused(key, says):
    with pytest.raises(PlanError, match=says):
        lit({key: 1})


def test_a_literal_is_shown_without_its_cast():
    shown = vane.range(1).select((col("id") * 0.5 + 2).alias("x")).explain()
    assert "(id * 0.5) + 2" in shown and "CAST" not in shown


def test_int_and_float_subclasses_are_the_numbers_they_are():
    import enum

    import numpy as np

    class Size(enum.IntEnum):
        LARGE = 3

    assert constant(Size.LARGE) == (pa.int64(), 3)
    assert constant(np.float64(0.1)) == (pa.float64(), 0.1)
    out = vane.range(1).select((col("id") + np.float64(0.5)).alias("x"))
    assert out.to_pylist() == [{"x": 0.5}]
