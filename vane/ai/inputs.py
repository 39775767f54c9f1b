"""What a model is sent for a row's value: text, whatever the column's type.

Text is sent as it is. Binary is sent as the UTF-8 text it holds, and a value that is not UTF-8
fails its row (sending Python's ``b'...'`` spelling of the bytes would be sending something the
row does not say). Numbers, booleans, dates, times and timestamps are sent as Arrow writes them
as text (``42``, ``0.5``, ``true``, ``2024-05-01``, ``2024-05-01 12:00:00.000000``), exact to
the last digit; durations and intervals as ISO 8601 durations (``P1DT2H``); lists, structs and
maps as JSON, their values written the same way. A null is no text: the row is not sent.

Each function takes one column and gives, per row, the text (None for a null) and the reason the
row cannot be sent (None where it can).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

Texts = tuple[list[str | None], list[str | None]]  # per row: its text, or why there is none

_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def texts(column: pa.Array | pa.ChunkedArray) -> Texts:
    """Each row's value as the text a model is sent (see the module's docstring)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return _render(column, json_text=False)


def _render(column: pa.Array, *, json_text: bool) -> Texts:
    """Texts of ``column``'s values; with ``json_text``, each a JSON value (strings quoted, a
    null ``null``) to be placed inside a list, struct or map."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _render(column.dictionary_decode(), json_text=json_text)
    if pa.types.is_null(kind):
        return (["null" if json_text else None] * len(column), [None] * len(column))
    if _is_text(kind):
        return _strings(column.to_pylist(), json_text)
    if _is_binary(kind):
        return _decoded(column.to_pylist(), json_text)
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_decimal(kind):
        return _numbers(pc.cast(column, pa.string()).to_pylist(), json_text)
    if pa.types.is_floating(kind):
        return _floats(pc.cast(column, pa.string()).to_pylist(), json_text)
    if pa.types.is_temporal(kind) and not _is_span(kind):
        return _strings(_moments(column), json_text)
    if pa.types.is_duration(kind):
        unit = _NANOS[kind.unit]
        spans = [None if v is None else _iso_duration(0, 0, v * unit) for v in _ints(column)]
        return _strings(spans, json_text)
    if pa.types.is_interval(kind):  # month_day_nano, the one interval Arrow has in Python
        spans = [None if v is None else _iso_duration(*v) for v in column.to_pylist()]
        return _strings(spans, json_text)
    if _is_list(kind):
        return _lists(column, json_text)
    if pa.types.is_struct(kind):
        return _structs(column, json_text)
    reason = (
        f"a value of type {kind} has no text to send; cast the column to VARCHAR (or build "
        "the text you mean) before this step"
    )
    present = column.is_valid().to_pylist()
    null = "null" if json_text else None
    return ([None if p else null for p in present], [reason if p else None for p in present])


def _is_list(kind: pa.DataType) -> bool:
    return any(
        getattr(pa.types, name, lambda _: False)(kind)
        for name in (
            "is_list",
            "is_large_list",
            "is_fixed_size_list",
            "is_list_view",
            "is_large_list_view",
            "is_map",
        )
    )


def _is_text(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or getattr(pa.types, "is_string_view", lambda _: False)(kind)
    )


def _is_binary(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or getattr(pa.types, "is_binary_view", lambda _: False)(kind)
    )


def _is_span(kind: pa.DataType) -> bool:
    return bool(pa.types.is_duration(kind) or pa.types.is_interval(kind))


def _moments(column: pa.Array) -> list[str | None]:
    """Dates, times and timestamps as Arrow writes them; a timestamp in a zone Arrow's zone
    database does not know, as the same instant in UTC."""
    try:
        values: list[str | None] = pc.cast(column, pa.string()).to_pylist()
    except pa.ArrowInvalid:
        if not pa.types.is_timestamp(column.type) or column.type.tz is None:
            raise
        utc = column.cast(pa.timestamp(column.type.unit, "UTC"))
        values = pc.cast(utc, pa.string()).to_pylist()
    return values


def _ints(column: pa.Array) -> list[int | None]:
    values: list[int | None] = column.cast(pa.int64()).to_pylist()
    return values


def _strings(values: list[str | None], json_text: bool) -> Texts:
    if json_text:
        return (["null" if v is None else json.dumps(v) for v in values], [None] * len(values))
    return (values, [None] * len(values))


def _numbers(values: list[str | None], json_text: bool) -> Texts:
    if json_text:
        return (["null" if v is None else v for v in values], [None] * len(values))
    return (values, [None] * len(values))


def _floats(values: list[str | None], json_text: bool) -> Texts:
    if not json_text:
        return (values, [None] * len(values))
    # JSON has no NaN or infinity: those are written as the strings Arrow writes for them.
    return (
        [
            "null" if v is None else (json.dumps(v) if v in ("nan", "inf", "-inf") else v)
            for v in values
        ],
        [None] * len(values),
    )


def _decoded(values: list[bytes | None], json_text: bool) -> Texts:
    out: list[str | None] = []
    errors: list[str | None] = []
    for value in values:
        if value is None:
            out.append("null" if json_text else None)
            errors.append(None)
            continue
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.append(None)
            errors.append(
                f"the binary value {value[:16]!r}{'...' if len(value) > 16 else ''} is not UTF-8 "
                f"text (byte {exc.start} is {value[exc.start]:#04x}); decode it to text before "
                "this step"
            )
            continue
        out.append(json.dumps(text) if json_text else text)
        errors.append(None)
    return out, errors


def _lists(column: pa.Array, json_text: bool) -> Texts:
    """Lists as JSON arrays; a map as a JSON object when its keys are text, else as a JSON
    array of ``[key, value]`` pairs."""
    keyed = pa.types.is_map(column.type)
    if keyed:  # a map is a list of key-value structs
        kind = column.type
        column = column.cast(pa.list_(pa.struct([kind.key_field, kind.item_field])))
    lengths = pc.list_value_length(column).to_pylist()
    items = column.flatten()
    if keyed:
        key_texts, key_errors = _render(items.field(0), json_text=True)
        value_texts, value_errors = _render(items.field(1), json_text=True)
        as_object = _is_text(kind.key_type)
        parts = [
            f"{k}: {v}" if as_object else f"[{k}, {v}]"
            for k, v in zip(key_texts, value_texts, strict=True)
        ]
        errors = [k or v for k, v in zip(key_errors, value_errors, strict=True)]
        opening, closing = ("{", "}") if as_object else ("[", "]")
    else:
        rendered, errors = _render(items, json_text=True)
        parts = [p or "" for p in rendered]
        opening, closing = "[", "]"
    null = "null" if json_text else None
    return _grouped(
        lengths, parts, errors, lambda inner: f"{opening}{', '.join(inner)}{closing}", null
    )


def _grouped(
    lengths: list[int | None],
    parts: list[str],
    errors: list[str | None],
    join: Callable[[list[str]], str],
    null: str | None,
) -> Texts:
    out: list[str | None] = []
    why: list[str | None] = []
    start = 0
    for length in lengths:
        if length is None:  # a null list: its items were dropped by flatten()
            out.append(null)
            why.append(None)
            continue
        failed = next((e for e in errors[start : start + length] if e is not None), None)
        out.append(None if failed else join(parts[start : start + length]))
        why.append(failed)
        start += length
    return out, why


def _structs(column: pa.StructArray, json_text: bool) -> Texts:
    names = [json.dumps(column.type.field(i).name) for i in range(column.type.num_fields)]
    fields = [_render(child, json_text=True) for child in column.flatten()]
    valid = column.is_valid().to_pylist()
    out: list[str | None] = []
    why: list[str | None] = []
    for row, present in enumerate(valid):
        if not present:
            out.append("null" if json_text else None)
            why.append(None)
            continue
        failed = next((errors[row] for _, errors in fields if errors[row] is not None), None)
        inner = ", ".join(f"{n}: {texts[row]}" for n, (texts, _) in zip(names, fields, strict=True))
        out.append(None if failed else "{" + inner + "}")
        why.append(failed)
    return out, why


def _iso_duration(months: int, days: int, nanoseconds: int) -> str:
    """An ISO 8601 duration: ``P1M2DT3H4M5.5S``; ``PT0S`` for nothing; a negative part keeps
    its sign (``-P1D``, ``P1M-2D``)."""
    parts = []
    if months:
        parts.append(f"{months}M")
    if days:
        parts.append(f"{days}D")
    clock = []
    sign = "-" if nanoseconds < 0 else ""
    hours, rest = divmod(abs(nanoseconds), 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds, fraction = divmod(rest, 10**9)
    if hours:
        clock.append(f"{sign}{hours}H")
    if minutes:
        clock.append(f"{sign}{minutes}M")
    if seconds or fraction:
        digits = f".{fraction:09d}".rstrip("0") if fraction else ""
        clock.append(f"{sign}{seconds}{digits}S")
    if not parts and not clock:
        return "PT0S"
    text = "P" + "".join(parts) + ("T" + "".join(clock) if clock else "")
    # One sign for the whole duration when every part has it, as most readers expect.
    if text.count("-") and all(p.startswith("-") for p in parts + clock):
        text = "-" + text.replace("-", "")
    return text
