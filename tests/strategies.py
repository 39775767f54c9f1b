"""Hypothesis strategies for Arrow types vane holds, and columns of values of them.

The types are those DuckDB stores exactly (every integer and float width, DECIMAL up to 38
digits, text, bytes, dates, timestamps of every unit with and without a zone, times in micro-
and nanoseconds, lists, fixed-size lists, structs, maps and dictionaries), nested up to two
levels. Values cover the edges: NaN, infinities and -0.0, the extremes of every integer width,
the first and last representable instants, text beyond ASCII, empty lists and nulls at every
depth.
"""

from __future__ import annotations

import datetime
import decimal
import functools
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

ZONES = (None, "UTC", "Asia/Tokyo", "America/New_York")
UNITS = ("s", "ms", "us", "ns")

_INTS = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}
# The instants Python's datetime can hold (row functions see datetimes), per unit.
_EPOCH = datetime.datetime(1970, 1, 1)
_FIRST = datetime.datetime(1, 1, 2)
_LAST = datetime.datetime(9999, 12, 30, 23, 59, 59, 999999)  # a day inside: zones shift it
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _instant_range(unit: str) -> tuple[int, int]:
    if unit == "ns":  # int64 nanoseconds: 1677-09-21 .. 2262-04-11
        return -(2**63) + 1, 2**63 - 1
    scale = _PER_SECOND[unit]
    low, high = _FIRST - _EPOCH, _LAST - _EPOCH  # exact integer parts, no float seconds
    first = (low.days * 86_400 + low.seconds) * scale
    last = (high.days * 86_400 + high.seconds) * scale + high.microseconds * scale // 1_000_000
    return first, last


# The strategies below are built once per argument and kept: a strategy is immutable, and
# building one anew for every column of every example (a recursive one above all) cost more
# than drawing from it (the tables of test_display's 150 examples took 12 s, nearly all of it
# building). The same strategies draw the same examples.


@functools.cache
def scalar_types() -> st.SearchStrategy[pa.DataType]:
    decimals = st.integers(1, 38).flatmap(
        lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s))
    )
    timestamps = st.builds(pa.timestamp, st.sampled_from(UNITS), st.sampled_from(ZONES))
    return st.one_of(
        st.sampled_from(
            [
                pa.bool_(),
                *_INTS,
                pa.float32(),
                pa.float64(),
                pa.string(),
                pa.binary(),
                pa.date32(),
                pa.time64("us"),
                pa.time64("ns"),
            ]
        ),
        decimals,
        timestamps,
    )


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    names = st.lists(
        st.text(
            st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=3,
        unique_by=str.lower,
    )
    return st.one_of(
        children.map(pa.list_),
        st.builds(pa.list_, children, st.integers(1, 3)),
        names.flatmap(
            lambda ns: st.tuples(*[children for _ in ns]).map(
                lambda ts: pa.struct(list(zip(ns, ts, strict=True)))
            )
        ),
        st.builds(pa.map_, st.sampled_from([pa.string(), pa.int64()]), children),
    )


@functools.cache
def arrow_types(depth: int = 2) -> st.SearchStrategy[pa.DataType]:
    """Scalar types, dictionaries of text, and lists/structs/maps of them up to ``depth``."""
    base = st.one_of(scalar_types(), st.just(pa.dictionary(pa.int32(), pa.string())))
    return st.recursive(scalar_types(), _nested, max_leaves=4) if depth else base


def _float_values(width: int) -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 0.0]),
        st.floats(width=width, allow_nan=True, allow_infinity=True),  # type: ignore[arg-type]
    )


@functools.cache
def values_of(arrow_type: pa.DataType) -> st.SearchStrategy[Any]:
    """One Python value of ``arrow_type`` or None (Arrow's form: a map is a list of pairs)."""
    return st.one_of(st.none(), _present(arrow_type))


def _present(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_integer(t):
        low, high = _INTS[t]
        return st.one_of(st.sampled_from([low, high, 0]), st.integers(low, high))
    if pa.types.is_float32(t):
        return _float_values(32)
    if pa.types.is_floating(t):
        return _float_values(64)
    if pa.types.is_decimal(t):
        digits = 10**t.precision - 1  # an unscaled integer of at most `precision` digits
        wide = decimal.Context(prec=80)  # scaleb rounds to the context's precision otherwise
        return st.integers(-digits, digits).map(lambda i: decimal.Decimal(i).scaleb(-t.scale, wide))
    if pa.types.is_string(t) or pa.types.is_dictionary(t):
        return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
    if pa.types.is_binary(t):
        return st.binary(max_size=8)
    if pa.types.is_date32(t):
        return st.dates()
    if pa.types.is_timestamp(t):
        return st.integers(*_instant_range(t.unit)).map(lambda v: ("raw", v))
    if pa.types.is_time64(t):
        day = 86_400 * (1_000_000_000 if t.unit == "ns" else 1_000_000)
        return st.integers(0, day - 1).map(lambda v: ("raw", v))
    if pa.types.is_fixed_size_list(t):
        return st.lists(values_of(t.value_type), min_size=t.list_size, max_size=t.list_size)
    if pa.types.is_list(t):
        return st.lists(values_of(t.value_type), max_size=3)
    if pa.types.is_struct(t):
        return st.fixed_dictionaries({f.name: values_of(f.type) for f in t})
    if pa.types.is_map(t):
        keys = _present(t.key_type)
        return st.lists(
            st.tuples(keys, values_of(t.item_type)), max_size=3, unique_by=lambda p: p[0]
        )
    raise NotImplementedError(str(t))


def _array(arrow_type: pa.DataType, values: list[Any]) -> pa.Array:
    """Values drawn by ``values_of`` as an array: timestamps and times are drawn as raw
    integers (no Python type holds a nanosecond), everything else as Python values."""
    t = arrow_type
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        raw = [None if v is None else v[1] for v in values]
        return pa.array(raw, pa.int64()).cast(t)
    if pa.types.is_dictionary(t):
        return pa.array(values, pa.string()).dictionary_encode()
    if pa.types.is_list(t) or pa.types.is_fixed_size_list(t):
        flat = [item for v in values if v is not None for item in v]
        mask = pa.array([v is None for v in values], pa.bool_())
        if pa.types.is_fixed_size_list(t):
            inner = _array(t.value_type, _spread(values, flat, t.list_size))
            return pa.FixedSizeListArray.from_arrays(inner, type=t, mask=mask)
        inner = _array(t.value_type, flat)
        offsets = [0]
        for v in values:
            offsets.append(offsets[-1] + (0 if v is None else len(v)))
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), inner, type=t, mask=mask)
    if pa.types.is_struct(t):
        children = [_array(f.type, [None if v is None else v[f.name] for v in values]) for f in t]
        mask = pa.array([v is None for v in values], pa.bool_())
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if pa.types.is_map(t):
        pairs = [p for v in values if v is not None for p in v]
        keys = _array(t.key_type, [k for k, _ in pairs])
        items = _array(t.item_type, [i for _, i in pairs])
        offsets = [0]
        for v in values:
            offsets.append(offsets[-1] + (0 if v is None else len(v)))
        mask = pa.array([v is None for v in values], pa.bool_())
        return pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()), keys, items, type=t, mask=mask
        )
    if pa.types.is_decimal(t):  # pyarrow infers a precision from the first value otherwise
        return pa.array(values, pa.decimal128(38, t.scale)).cast(t)
    return pa.array(values, t)


def _spread(values: list[Any], flat: list[Any], size: int) -> list[Any]:
    """A fixed-size list column's child values: a null row still takes ``size`` slots."""
    out: list[Any] = []
    items = iter(flat)
    for v in values:
        out.extend([None] * size if v is None else [next(items) for _ in range(size)])
    return out


@st.composite
def tables(draw: st.DrawFn, max_columns: int = 3, max_rows: int = 5) -> pa.Table:
    """A table of 1..max_columns columns of drawn types and 0..max_rows rows."""
    count = draw(st.integers(1, max_columns))
    rows = draw(st.integers(0, max_rows))
    columns = {}
    for i in range(count):
        arrow_type = draw(arrow_types())
        values = draw(st.lists(values_of(arrow_type), min_size=rows, max_size=rows))
        columns[f"c{i}"] = _array(arrow_type, values)
    return pa.table(columns)
