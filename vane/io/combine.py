"""Which types the files of one source may be combined into: only those that keep every value.

DuckDB reads a folder whose files disagree about a column's type (``union_by_name``) by casting
each file's column to one common type it picks, and its choice can change values: BIGINT and
DOUBLE become DOUBLE (``2**53 + 1`` reads as ``9007199254740992.0``), a DECIMAL(38, 10) meets a
DECIMAL(38, 0) and loses its fraction, TIMESTAMP_NS meets TIMESTAMPTZ and drops the zone. So
vane reads each kind of file alone as well, and compares: every file's type must be one that
the combined type holds for *every* value it can have, not just the values it happens to hold
(a rule on types, so the answer never depends on the data). Otherwise the read is refused,
naming the column, two files and their types.

What ``holds`` accepts (types as DuckDB gives them to Arrow):

- integers into integers whose range covers theirs, into floats whose mantissa holds every one
  of them (up to 16 bits into FLOAT, up to 32 into DOUBLE), into decimals with enough digits;
- floats into wider floats (NaN, infinities and -0.0 stay as they are);
- decimals into decimals with at least their scale and their integer digits;
- timestamps into timestamps of the same unit (a finer unit overflows for distant years, a
  coarser one cuts), time-zone aware or not alike (the zone name may differ: the instant stays);
  times of day into finer units (a day fits every unit); dates into dates;
- text into text and bytes into bytes, whatever their width or dictionary encoding;
- lists, structs (a file may lack fields) and maps, by the same rules for what they hold.

CSV and JSON files hold text, and where their files disagree DuckDB gives the column as text
(VARCHAR, or JSON text for JSON): each value is then the file's own text, so any type into text
is accepted for them. Parquet files hold typed values: a number read as text would change.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vane.errors import SchemaMismatchError
from vane.io.readers import own_columns, scan_sql

if TYPE_CHECKING:
    import duckdb

# Bits of integer a float holds exactly (its significand, with the implicit bit).
_MANTISSA_BITS = {16: 11, 32: 24, 64: 53}
_TIME_UNITS = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def _texts(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _bytes(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _lists(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
        or pa.types.is_fixed_size_list(t)
    )


def _integer_range(t: pa.DataType) -> tuple[int, int]:
    bits = int(t.bit_width)
    if pa.types.is_signed_integer(t):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def holds(source: pa.DataType, target: pa.DataType, *, text: bool = False) -> bool:
    """Whether every value of type ``source`` is exactly a value of type ``target``;
    ``text``: the files hold text (CSV, JSON), so text holds anything."""
    if source.equals(target) or pa.types.is_null(source):
        return True
    if pa.types.is_dictionary(source):
        return holds(source.value_type, target, text=text)
    if pa.types.is_dictionary(target):
        return holds(source, target.value_type, text=text)
    if text and _texts(target):
        return True
    if pa.types.is_integer(source):
        low, high = _integer_range(source)
        if pa.types.is_integer(target):
            target_low, target_high = _integer_range(target)
            return target_low <= low and high <= target_high
        if pa.types.is_floating(target):
            return max(-low, high) <= 1 << _MANTISSA_BITS[target.bit_width]
        if pa.types.is_decimal(target):
            return bool(max(-low, high) < 10 ** int(target.precision - target.scale))
        return False
    if pa.types.is_floating(source):
        return bool(pa.types.is_floating(target) and target.bit_width >= source.bit_width)
    if pa.types.is_decimal(source):
        digits = int(source.precision - source.scale)
        if pa.types.is_decimal(target):
            return bool(target.scale >= source.scale and target.precision - target.scale >= digits)
        if pa.types.is_integer(target) and source.scale == 0:
            low, high = _integer_range(target)
            return bool(-low >= 10**digits - 1 and high >= 10**digits - 1)
        return False
    if pa.types.is_timestamp(source):
        return bool(
            pa.types.is_timestamp(target)
            and source.unit == target.unit
            and (source.tz is None) == (target.tz is None)
        )
    if pa.types.is_time(source):
        return bool(
            pa.types.is_time(target) and _TIME_UNITS[target.unit] >= _TIME_UNITS[source.unit]
        )
    if pa.types.is_date(source):
        return bool(pa.types.is_date32(source) and pa.types.is_date(target))
    if _texts(source):
        return _texts(target)
    if _bytes(source):
        return _bytes(target) and not pa.types.is_fixed_size_binary(target)
    if _lists(source) and _lists(target):
        if pa.types.is_fixed_size_list(target) and not (
            pa.types.is_fixed_size_list(source) and source.list_size == target.list_size
        ):
            return False
        return holds(source.value_type, target.value_type, text=text)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        fields = {f.name: f.type for f in target}
        return all(f.name in fields and holds(f.type, fields[f.name], text=text) for f in source)
    if pa.types.is_map(source) and pa.types.is_map(target):
        return holds(source.key_type, target.key_type, text=text) and holds(
            source.item_type, target.item_type, text=text
        )
    return False


def check_files(
    cursor: duckdb.DuckDBPyConnection,
    fmt: str,
    files: Sequence[str],
    options: Mapping[str, Any],
    *,
    label: str,
    combined: pa.Schema,
    schemas: Sequence[pa.Schema] | None,
    skip: Collection[str],
) -> None:
    """Check that ``files`` read together (``combined``, the types DuckDB gives them) keep
    every value they have read alone. Parquet: ``schemas`` are the files' stored schemas, one
    file of each is read alone (None: all alike, nothing to check); CSV and JSON are typed by
    DuckDB file by file, so every file is."""
    if fmt == "parquet":
        if schemas is None:
            return
        kinds: dict[str, pa.Schema] = {}
        for path, schema in zip(files, schemas, strict=True):
            if not any(schema.equals(s, check_metadata=False) for s in kinds.values()):
                kinds[path] = schema
        each = list(kinds)
    else:
        each = list(files)
    own = own_columns(fmt, options, alone=True)
    alone = [
        (p, cursor.sql(scan_sql(fmt, [p], own)).limit(0).to_arrow_table().schema) for p in each
    ]
    check_combined(label, combined, alone, text=fmt != "parquet", skip=skip)


def check_combined(
    label: str,
    combined: pa.Schema,
    files: Sequence[tuple[str, pa.Schema]],
    *,
    text: bool,
    skip: Collection[str] = (),
) -> None:
    """A ``SchemaMismatchError`` if reading ``files`` (each path with the schema it has when
    read alone) as ``combined`` would change a value of some column not in ``skip``."""
    for field in combined:
        if field.name in skip:
            continue
        kinds = [(p, s.field(field.name).type) for p, s in files if field.name in s.names]
        for path, kind in kinds:
            if holds(kind, field.type, text=text):
                continue
            other = next(((p, k) for p, k in kinds if not k.equals(kind)), None)
            raise SchemaMismatchError(
                _mismatch(label, field.name, (path, kind), other, field.type, text=text)
            )


def _mismatch(
    label: str,
    column: str,
    one: tuple[str, pa.DataType],
    other: tuple[str, pa.DataType] | None,
    combined: pa.DataType,
    *,
    text: bool,
) -> str:
    from vane.types import arrow_to_duckdb

    def name(t: pa.DataType) -> str:
        try:
            return arrow_to_duckdb(t)
        except Exception:  # a type DuckDB has no name for: Arrow's own name says enough
            return str(t)

    shown = f"{name(one[1])} in {one[0]!r}"
    if other is not None:
        shown += f" and {name(other[1])} in {other[0]!r}"
    fix = (
        f", or give the column one type with types={{{column!r}: '...'}}"
        if text
        else ", or rewrite the files with one type"
    )
    return (
        f"the files of {label!r} disagree about the type of column {column!r}: {shown}. Read "
        f"together they would be {name(combined)}, which does not hold every {name(one[1])} "
        "value exactly, and vane combines files only where every value stays as it is. Read the "
        "files separately and cast the column as you mean it, leave the column out with "
        f"columns=[...]{fix}"
    )
