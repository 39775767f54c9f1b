"""Lossless casts: a value becomes another type only if it means exactly the same there.

The rules, for the UDF output contract (and anything else that must not change data):

- numbers: integers to wider integers, or to floats and decimals that hold them exactly; floats
  to integers only when whole (3.0 -> 3, never 3.5 -> 3); floats to narrower floats with
  rounding to the nearest value (embeddings come as float64 and are stored as FLOAT), but never
  a finite value that overflows to infinity; anything to a decimal only if reading it back
  gives the same number (0.125 does not fit DECIMAL(10, 2)); decimals to floats likewise;
- timestamps: to a coarser unit or to a date only when nothing is cut (13:45 does not become a
  date); a time zone is never added, dropped or guessed (aware to naive, or naive to aware, is
  an error; aware to another zone keeps the instant and is allowed);
- text and bytes to their large forms and back (split into pieces when one would overflow);
  text never becomes a number, nor a number text; booleans are not numbers;
- lists, fixed-size lists (every row of the right length), structs (the same field names, in
  any order) and maps, by the same rules applied to what they hold.

``cast_lossless`` checks values with Arrow compute, not Python loops: it is on the path of
every batch a UDF returns. A failure names the first offending row and why.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

Predicate = Callable[[pa.DataType], bool]


class LossyCast(Exception):
    """A value would change; ``row`` is its position in the array given to ``cast_lossless``
    (None when the types alone make it impossible)."""

    def __init__(self, reason: str, row: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.row = row


_LISTS: tuple[Predicate, ...] = (
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_fixed_size_list,
)
_TEXTS: tuple[Predicate, ...] = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_string_view,
)
_BYTES: tuple[Predicate, ...] = (
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_binary_view,
)


def _any(checks: tuple[Predicate, ...], t: pa.DataType) -> bool:
    return any(check(t) for check in checks)


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether some values of ``source`` can become ``target`` losslessly (the values decide
    the rest)."""
    if pa.types.is_null(source) or source.equals(target):
        return True
    if pa.types.is_dictionary(source):
        return castable(source.value_type, target)
    if pa.types.is_dictionary(target):  # an ENUM or a dictionary-encoded column
        return castable(source, target.value_type)
    if _is_number(source) and _is_number(target):
        return True
    if _any(_LISTS, source) and _any(_LISTS, target):
        return castable(source.value_type, target.value_type)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        fields = {f.name: f.type for f in source}
        return set(fields) == {f.name for f in target} and all(
            castable(fields[f.name], f.type) for f in target
        )
    if pa.types.is_map(source) and pa.types.is_map(target):
        return castable(source.key_type, target.key_type) and castable(
            source.item_type, target.item_type
        )
    for family in (_TEXTS, _BYTES):
        if _any(family, source) and _any(family, target):
            return True
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        return (source.tz is None) == (target.tz is None)
    if pa.types.is_timestamp(source) and pa.types.is_date(target):
        return source.tz is None
    if pa.types.is_date(source) and (pa.types.is_date(target) or pa.types.is_timestamp(target)):
        return not pa.types.is_timestamp(target) or target.tz is None
    time_like = (pa.types.is_time, pa.types.is_duration)
    return any(f(source) and f(target) for f in time_like)


def cast_lossless(array: pa.Array, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``array`` as ``target``, or ``LossyCast`` naming the first row that would change."""
    source = array.type
    if source.equals(target):
        return array
    if pa.types.is_dictionary(source):
        return cast_lossless(array.dictionary_decode(), target)
    if pa.types.is_dictionary(target):
        values = cast_lossless(array, target.value_type)
        return _cast(values, target) if isinstance(values, pa.Array) else values.cast(target)
    if not castable(source, target):
        raise LossyCast(mismatch(source, target))
    _check(array, target)
    return _cast(array, target)


def mismatch(source: pa.DataType, target: pa.DataType) -> str:
    """Why no value of ``source`` can become ``target``, in a few words."""
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        zone = f"the time zone {source.tz}" if source.tz else "no time zone"
        other = f"the time zone {target.tz}" if target.tz else "none"
        return f"timestamps with {zone} cannot become timestamps with {other} without guessing"
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        have, want = {f.name for f in source}, {f.name for f in target}
        if have != want:
            return (
                f"the struct has fields {sorted(have)}, the schema {sorted(want)} "
                f"(missing {sorted(want - have)}, extra {sorted(have - want)})"
            )
    return "the types hold different kinds of values"


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    try:
        return array.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowCapacityError) as exc:
        if "overflow" not in str(exc).lower() and not isinstance(exc, pa.ArrowCapacityError):
            raise LossyCast(str(exc)) from None
    # A large (64-bit offset) column too big for 32-bit offsets: cut it into pieces that fit.
    return pa.chunked_array([p.cast(target, safe=True) for p in _pieces(array)], type=target)


_PIECE_BYTES = 2**31 - 2**20  # under the 2 GiB that 32-bit offsets can address


def _pieces(array: pa.Array) -> list[pa.Array]:
    """``array`` cut into slices whose data each fits 32-bit offsets."""
    offsets = np.asarray(array.offsets)  # large string/binary/list: int64 offsets
    pieces, start = [], 0
    while start < len(array):
        limit = offsets[start] + _PIECE_BYTES
        end = int(np.searchsorted(offsets, limit, side="right")) - 1
        end = max(end, start + 1)
        pieces.append(array.slice(start, min(end, len(array)) - start))
        start = min(end, len(array))
    return pieces


def _first(mask: pa.Array | pa.ChunkedArray) -> int | None:
    """The position of the first true value of a boolean array, or None."""
    import pyarrow.compute as pc  # (on first use: 40 ms of a first result)

    index = pc.index(pc.fill_null(mask, False), True).as_py()
    return None if index < 0 else int(index)


def _check(array: pa.Array, target: pa.DataType) -> None:
    """Raise ``LossyCast`` if any value of ``array`` would change as ``target``."""
    source = array.type
    if pa.types.is_null(source) or source.equals(target):
        return
    if pa.types.is_dictionary(source):
        _check(array.dictionary_decode(), target)
    elif _any(_LISTS, source):
        _check_list(array, target)
    elif pa.types.is_struct(source):
        for child, name in zip(array.flatten(), [f.name for f in source], strict=True):
            _check(child, target.field(name).type)
    elif pa.types.is_map(source):
        entries = pa.struct([("key", target.key_type), ("value", target.item_type)])
        _check_list_values(array, array.values, entries)
    else:
        _check_leaf(array, target)


def _check_list(array: pa.Array, target: pa.DataType) -> None:
    if pa.types.is_fixed_size_list(target):
        import pyarrow.compute as pc  # (on first use: 40 ms of a first result)

        lengths = pc.list_value_length(array)
        wrong = _first(pc.not_equal(lengths, target.list_size))
        if wrong is not None:
            raise LossyCast(f"length {lengths[wrong].as_py()}, expected {target.list_size}", wrong)
    _check_list_values(array, array.values, target.value_type)


def _check_list_values(array: pa.Array, values: pa.Array, target: pa.DataType) -> None:
    """Check a list array's flattened values, and name the row a bad value belongs to."""
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        values = values.slice(array.offset * size, len(array) * size)
        starts = np.arange(len(array) + 1) * size
    else:
        offsets = np.asarray(array.offsets)
        values = values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        starts = offsets - offsets[0]
    try:
        _check(values, target)
    except LossyCast as exc:
        row = None if exc.row is None else int(np.searchsorted(starts, exc.row, "right")) - 1
        raise LossyCast(exc.reason, row) from None


def _check_leaf(array: pa.Array, target: pa.DataType) -> None:
    source = array.type
    try:
        out = _cast(array, target)
    except LossyCast:
        raise LossyCast(*_first_failure(array, target)) from None
    import pyarrow.compute as pc  # (on first use: 40 ms of a first result)

    if pa.types.is_floating(source) and pa.types.is_floating(target):
        overflow = pc.and_(pc.is_inf(out), pc.invert(pc.is_inf(array)))
        row = _first(overflow)
        if row is not None:
            raise LossyCast(f"{array[row].as_py()!r} is too large for {target}", row)
    elif _needs_round_trip(source, target):
        back = pc.cast(out, source, safe=False)
        same = (
            pc.or_(pc.equal(back, array), pc.and_(pc.is_nan(array), pc.is_nan(back)))
            if (pa.types.is_floating(source))
            else pc.equal(back, array)
        )
        row = _first(pc.invert(same))
        if row is not None:
            raise LossyCast(f"{array[row].as_py()!r} would become {out[row].as_py()!r}", row)


def _needs_round_trip(source: pa.DataType, target: pa.DataType) -> bool:
    """Casts that Arrow's safe mode lets lose information: check by reading the value back."""
    decimal = pa.types.is_decimal
    return bool(
        (decimal(target) and not decimal(source) and not pa.types.is_integer(source))
        or (decimal(source) and pa.types.is_floating(target))
        or (pa.types.is_timestamp(source) and pa.types.is_date(target))
    )


def _first_failure(array: pa.Array, target: pa.DataType) -> tuple[str, int | None]:
    """Arrow refused the cast without saying where: find the first value it refuses, in blocks
    and then one by one (this runs only when a batch is already failing)."""
    block = 1024
    for start in range(0, len(array), block):
        piece = array.slice(start, block)
        try:
            piece.cast(target, safe=True)
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            first_reason = str(exc)
        for offset in range(len(piece)):
            try:
                piece.slice(offset, 1).cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                return str(exc), start + offset
        return first_reason, start
    return f"Arrow cannot cast {array.type} to {target}", None
