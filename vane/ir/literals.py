"""Constants in a plan: each Python type stands for one SQL type, whatever the value
(docs/expressions.md has the table). ``check_literal`` refuses, when ``lit()`` is called, a
value that its type cannot hold; ``literal_sql`` writes a constant as DuckDB SQL text.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from vane._sql import quote_literal, sql_list
from vane.errors import PlanError
from vane.ir.parse import check_text

_MAX_DECIMAL_DIGITS = 38  # DuckDB's widest DECIMAL
_MAX_INTERVAL = dt.timedelta(microseconds=(2**63 - 1) // 1000)


def check_literal(value: Any) -> None:
    """A ``PlanError`` unless ``value`` has the one SQL type its Python type stands for
    (``literal_sql``): an int must fit BIGINT, a Decimal DECIMAL(38), and so on."""
    if isinstance(value, (list, tuple)):
        for item in value:
            check_literal(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not key or "\x00" in key:
                raise PlanError(
                    f"lit(): a dict's keys name the fields of a STRUCT: non-empty strings "
                    f"without NUL characters, got {key!r}"
                )
            check_text(key, "lit()")
            check_literal(item)
    elif isinstance(value, str):
        check_text(value, "lit()")
    elif isinstance(value, int) and not isinstance(value, bool) and not _is_bigint(value):
        raise PlanError(
            f"lit(): {value} does not fit BIGINT, the type of a Python int in vane. Pass "
            "decimal.Decimal(n) for a DECIMAL (up to 38 digits), or a float for a DOUBLE"
        )
    elif isinstance(value, decimal.Decimal):
        _check_decimal(value)
    elif isinstance(value, dt.time) and value.tzinfo is not None:
        raise PlanError(
            f"lit(): {value!r} has a time zone, and a TIME column has none (Arrow has no time "
            "with a zone). Pass the time without tzinfo, or a datetime with it"
        )
    elif isinstance(value, dt.timedelta) and abs(value) > _MAX_INTERVAL:
        # DuckDB hands an INTERVAL to Arrow in nanoseconds, and a longer one wraps around
        # without a word.
        raise PlanError(f"lit(): {value!r} is longer than an INTERVAL passes intact (292 years)")
    elif isinstance(value, dt.datetime):
        _check_instant(value)
    elif not (
        value is None
        or isinstance(
            value, (bool, int, float, str, bytes, decimal.Decimal, dt.date, dt.time, dt.timedelta)
        )
    ):
        raise PlanError(
            f"lit(): {type(value).__name__} values cannot be SQL literals; use numbers, strings, "
            "bytes, booleans, None, dates and times, decimals, or lists and dicts of those"
        )


def _is_bigint(value: int) -> bool:
    # Not `in range(...)`: that walks the whole range for an int subclass (an IntEnum).
    return -(2**63) <= value < 2**63


def _check_instant(value: dt.datetime) -> None:
    offset = value.utcoffset()
    if offset is None:
        return
    try:
        value.replace(tzinfo=None) - offset  # the UTC time literal_sql writes
    except OverflowError:
        raise PlanError(
            f"lit(): {value!r} is before year 1 or after year 9999 in UTC, where a "
            "TIMESTAMPTZ keeps it and Python cannot read it back"
        ) from None


def _check_decimal(value: decimal.Decimal) -> None:
    if not value.is_finite():
        raise PlanError(
            f"lit(): {value!r} is not a number a DECIMAL can hold; use float('nan') or "
            "float('inf') for a DOUBLE"
        )
    if decimal_type(value)[0] > _MAX_DECIMAL_DIGITS:
        raise PlanError(
            f"lit(): {value!r} needs more than {_MAX_DECIMAL_DIGITS} digits, the most a DECIMAL "
            "holds; round it (value.quantize(...)) or pass a float for a DOUBLE"
        )


def decimal_type(value: decimal.Decimal) -> tuple[int, int]:
    """The DECIMAL(precision, scale) that holds a finite ``value`` as written:
    ``Decimal("1.50")`` is DECIMAL(3, 2), ``Decimal("1E+3")`` DECIMAL(4, 0)."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    scale = max(0, -exponent)
    return max(len(digits) + max(0, exponent), scale, 1), scale


def literal_sql(value: Any) -> str:
    """A Python value as a SQL constant of one fixed type per Python type, whatever the value
    (``docs/expressions.md``): DuckDB would type a bare ``0.5`` as DECIMAL(2,1) and ``5`` as
    INTEGER but ``2**40`` as BIGINT. Numbers, dates and times are cast from their exact text,
    so the constant is the Python value itself (``-0.0``, NaN and 17-digit floats included).
    ``Literal`` has already refused the values that have no such type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    # int() and float(): an IntEnum or a numpy float64 is written as the number it is.
    if isinstance(value, int):
        return f"CAST({int(value)} AS BIGINT)"
    if isinstance(value, float):
        return f"CAST('{float(value)!r}' AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        precision, scale = decimal_type(value)
        return f"CAST('{value:f}' AS DECIMAL({precision}, {scale}))"
    if isinstance(value, str):
        # Untyped on purpose: VARCHAR alone, and read as the other side's type in a
        # comparison (col("day") > "2024-01-01" compares dates), as in Polars.
        return quote_literal(value)
    if isinstance(value, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::BLOB"
    if isinstance(value, dt.datetime):
        offset = value.utcoffset()
        if offset is None:
            return f"CAST('{value.isoformat(sep=' ')}' AS TIMESTAMP)"
        # The instant in UTC: DuckDB reads no offset finer than a second.
        utc = value.replace(tzinfo=None) - offset
        return f"CAST('{utc.isoformat(sep=' ')}+00' AS TIMESTAMPTZ)"
    if isinstance(value, dt.date):
        return f"CAST('{value.isoformat()}' AS DATE)"
    if isinstance(value, dt.time):
        return f"CAST('{value.isoformat()}' AS TIME)"
    if isinstance(value, dt.timedelta):
        # All in microseconds, not days: a timedelta's day is always 24 hours, an INTERVAL's
        # day is a calendar day (23 or 25 hours across a DST change).
        return f"TO_MICROSECONDS(CAST({value // dt.timedelta(microseconds=1)} AS BIGINT))"
    if isinstance(value, (list, tuple)):
        return "[" + sql_list(literal_sql(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + sql_list(f"{quote_literal(k)}: {literal_sql(v)}" for k, v in value.items()) + "}"
        )
    raise PlanError(f"{type(value).__name__} values cannot be SQL literals")
