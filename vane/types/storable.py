"""In-memory Arrow data as DuckDB can hold it exactly, or an error naming the column and type.

DuckDB reads most Arrow types as they are. Where it does not, a source of Arrow data (a table,
a stream, a pandas DataFrame, a dict of columns) is brought into a type that holds the same
values, or refused before anything runs:

- ``halffloat`` becomes ``FLOAT`` and ``decimal256`` of up to 38 digits ``DECIMAL`` (every value
  the same); a ``decimal256`` of more digits has no DuckDB type and is refused;
- durations and ``month_day_nano`` intervals become DuckDB ``INTERVAL``s, which count
  microseconds (and hand them back as ``month_day_nano``, which the relation's schema then
  says): a value with a part finer than a microsecond, or a duration past +-292 years (which
  DuckDB's interval would wrap), is refused;
- names DuckDB would change are refused: an empty column or struct field name, a name with a
  NUL character, and two columns whose names differ only in case.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from vane.errors import SchemaError

__all__ = ["storable_reader", "storable_table"]

# A duration DuckDB's INTERVAL hands back exactly: at most int64 nanoseconds.
_NANOS_PER = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_INT64_MAX = 2**63 - 1


def _stored(t: pa.DataType) -> pa.DataType:
    """The type DuckDB holds ``t``'s values in exactly (``t`` itself where nothing changes)."""
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_decimal256(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_stored(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_stored(t.key_type), _stored(t.item_type), t.keys_sorted)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_stored(t.value_type)), t.list_size)
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_stored(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_stored(t.value_type)))
    return t


def _refusal(name: str, t: pa.DataType, why: str, fix: str) -> SchemaError:
    return SchemaError(f"column {name!r} ({t}) {why}; {fix}")


def _check_values(name: str, array: pa.Array) -> None:
    """Refuse values DuckDB would change: sub-microsecond intervals, durations it would wrap."""
    t = array.type
    if pa.types.is_duration(t):
        _check_duration(name, array)
    elif pa.types.is_interval(t):
        _check_interval(name, array)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            _check_values(name, array.field(i))
    elif pa.types.is_map(t):
        _check_values(name, array.keys)
        _check_values(name, array.items)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        _check_values(name, array.flatten())


def _check_duration(name: str, array: pa.Array) -> None:
    t = array.type
    if t.unit == "ns":
        try:
            array.cast(pa.duration("us"), safe=True)
        except pa.ArrowInvalid:
            raise _refusal(
                name,
                t,
                "holds a duration with nanoseconds, and DuckDB's INTERVAL counts microseconds",
                "round it to microseconds first (or cast it to BIGINT nanoseconds)",
            ) from None
        return
    limit = _INT64_MAX // _NANOS_PER[t.unit]
    values = array.cast(pa.int64())
    import pyarrow.compute as pc  # (on first use: 40 ms of a first result)

    too_far = pc.greater(pc.abs(values), limit)
    if pc.any(too_far).as_py():
        raise _refusal(
            name,
            t,
            "holds a duration past +-292 years, which DuckDB's INTERVAL cannot hand back",
            "cast it to BIGINT first",
        )


def _check_interval(name: str, array: pa.Array) -> None:
    for value in array.to_pylist():  # MonthDayNano tuples; intervals are rare and short
        if value is not None and value.nanoseconds % 1000:
            raise _refusal(
                name,
                array.type,
                "holds an interval with nanoseconds, and DuckDB's INTERVAL counts microseconds",
                "round it to microseconds first",
            )


def _check_name(name: str, where: str) -> None:
    """DuckDB renames an empty name (``v0``, ``element1``) and cuts a name at a NUL
    character: refuse both rather than hand back another name."""
    if not name or "\x00" in name:
        raise SchemaError(
            f"{where} {name!r} cannot be kept: DuckDB renames an empty name and cuts a name "
            "at a NUL character. Rename it first"
        )


def _check_names(t: pa.DataType, column: str) -> None:
    if pa.types.is_struct(t):
        for f in t:
            _check_name(f.name, f"column {column!r} has a struct field")
    for i in range(t.num_fields):
        _check_names(t.field(i).type, column)


def _stored_schema(schema: pa.Schema) -> pa.Schema:
    seen: dict[str, str] = {}
    for name in schema.names:
        _check_name(name, "a column named")
        if name.lower() in seen:
            raise SchemaError(
                f"columns {seen[name.lower()]!r} and {name!r} differ only in case, and DuckDB "
                "names columns case-insensitively (it would rename one). Rename one of them"
            )
        seen[name.lower()] = name
    fields = []
    for f in schema:
        _check_names(f.type, f.name)
        stored = _stored(f.type)
        if pa.types.is_decimal256(stored):
            raise _refusal(
                f.name,
                f.type,
                "has more than 38 digits, and DuckDB's DECIMAL holds at most 38",
                "cast it to DOUBLE or VARCHAR first",
            )
        fields.append(f.with_type(stored))
    return pa.schema(fields, metadata=schema.metadata)


def _needs_value_check(t: pa.DataType) -> bool:
    if pa.types.is_duration(t) or pa.types.is_interval(t):
        return True
    return any(_needs_value_check(t.field(i).type) for i in range(t.num_fields))


def _check_batch(batch: pa.RecordBatch | pa.Table) -> None:
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if _needs_value_check(column.type):
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            for chunk in chunks:
                _check_values(name, chunk)


def _has_duration(t: pa.DataType) -> bool:
    if pa.types.is_duration(t):
        return True
    return any(_has_duration(t.field(i).type) for i in range(t.num_fields))


def _as_intervals(data: pa.Table) -> pa.Table:
    """Duration columns as the ``INTERVAL``s DuckDB reads them as (so the relation's schema
    says what its rows hold), converted by DuckDB itself; other columns untouched."""
    names = [f.name for f in data.schema if _has_duration(f.type)]
    if not names:
        return data
    from vane import _engine  # DuckDB loads with the first relation, not with `import vane`

    cursor = _engine.cursor()
    try:
        converted = cursor.from_arrow(data.select(names)).to_arrow_table()
    finally:
        cursor.close()
    for name in names:
        data = data.set_column(data.schema.get_field_index(name), name, converted.column(name))
    return data


def storable_table(table: pa.Table) -> pa.Table:
    """``table`` in types DuckDB holds exactly, or a ``SchemaError`` naming the column."""
    schema = _stored_schema(table.schema)
    _check_batch(table)
    return _as_intervals(table if schema.equals(table.schema) else table.cast(schema))


def storable_reader(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """A stream of ``reader``'s batches in types DuckDB holds exactly; the types are checked at
    once, the values of each batch as it passes (a refused value fails the stream there)."""
    schema = _stored_schema(reader.schema)
    checked = any(_needs_value_check(f.type) for f in schema)
    if schema.equals(reader.schema) and not checked:
        return reader
    # what the batches become: the types above, durations as DuckDB's intervals
    final = _as_intervals(schema.empty_table()).schema

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            _check_batch(batch)
            table = pa.Table.from_batches(
                [batch if schema.equals(reader.schema) else batch.cast(schema)]
            )
            yield from _as_intervals(table).cast(final).to_batches()

    return pa.RecordBatchReader.from_batches(final, batches())
