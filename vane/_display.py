"""Tables as text for ``Relation.show()`` and the ``vane`` command: DuckDB's box style, as wide
as the terminal (or the ``width`` asked) allows and no wider.

Each column gets the room its values need when the table fits; when it does not, narrow
columns keep their width and the long ones share what is left, so text and vectors show as
much as fits. Only what does not fit is cut, and a cut value says how long it was: a 384-float
vector shows its first items and ``384 items``, long text its start and ``(1,234 chars)``.
When even short columns do not fit, the middle ones are left out, as DuckDB does. Widths are
counted in terminal cells (a CJK character takes two), and control characters show escaped,
so no value can break a line or the frame.
"""

from __future__ import annotations

import shutil
import unicodedata
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from vane.errors import ConfigurationError

DEFAULT_WIDTH = 120  # when the output is not a terminal and $COLUMNS is not set
MIN_WIDTH = 20  # narrower than this no table is worth reading
MIN_CELL = 16  # a long column keeps at least this much when others need room: "text… (35 chars)"
GAP = "…"  # the column standing for the columns left out


def terminal_width(width: int | None = None) -> int:
    """``width`` if given (checked), else the terminal's ($COLUMNS first), else 120."""
    if width is None:
        return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 20)).columns)
    if isinstance(width, bool) or not isinstance(width, int) or width < MIN_WIDTH:
        raise ConfigurationError(
            f"show(): width={width!r} must be a whole number of characters, at least "
            f"{MIN_WIDTH}; leave it out to fit the terminal"
        )
    return width


# ---- text width ------------------------------------------------------------------------------


def _char_width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def text_width(text: str) -> int:
    """How many terminal cells ``text`` takes."""
    return sum(_char_width(c) for c in text)


def _prefix(text: str, room: int) -> str:
    """The longest start of ``text`` that takes at most ``room`` cells."""
    used = 0
    for end, char in enumerate(text):
        used += _char_width(char)
        if used > room:
            return text[:end]
    return text


def _clean(text: str) -> str:
    """One line: runs of whitespace as one space, other unprintable characters escaped."""
    line = " ".join(text.split())
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in line)


def _cut(text: str, room: int, size: int | None = None, unit: str = "") -> str:
    """``text`` if it fits in ``room`` cells; else its start, "…" and, if there is room for
    it, the size of the whole value."""
    if text_width(text) <= room:
        return text
    tail = f"… ({size:,} {unit})" if size is not None else "…"
    if text_width(tail) + 1 > room:
        tail = "…"
    return _prefix(text, room - text_width(tail)).rstrip() + tail


# ---- values ----------------------------------------------------------------------------------


def cell(value: Any, room: int = 32) -> str:
    """One value as one line of at most ``room`` cells, as much of it as fits."""
    if value is None:
        return _cut("NULL", room)
    if isinstance(value, float):
        return _cut(f"{value:.6g}", room)
    if isinstance(value, (list, tuple)):
        return _items(["[", "]"], [cell(v, room) for v in _first(value, room)], len(value), room)
    if isinstance(value, dict):
        shown = [f"{_clean(str(k))}: {cell(v, room)}" for k, v in _first(value.items(), room)]
        return _items(["{", "}"], shown, len(value), room, unit="fields")
    if isinstance(value, (bytes, bytearray)):
        return _cut(repr(bytes(value[: room + 1])), room, size=len(value), unit="bytes")
    if isinstance(value, str):
        return _cut(_clean(value), room, size=len(value), unit="chars")
    return _cut(_clean(str(value)), room)


def _first(values: Any, room: int) -> list[Any]:
    """The values that could show in ``room`` cells (each takes at least one): a long vector
    is never turned into text whole."""
    out: list[Any] = []
    for value in values:
        if len(out) > room:
            break
        out.append(value)
    return out


def _items(ends: list[str], shown: list[str], total: int, room: int, unit: str = "items") -> str:
    """As many of the ``shown`` items as fit, then how many there are in all."""
    opening, closing = ends
    whole = opening + ", ".join(shown) + closing
    if len(shown) == total and text_width(whole) <= room:
        return whole
    for count in range(min(len(shown), total - 1), -1, -1):
        head = ", ".join(shown[:count]) + ", " if count else ""
        text = f"{opening}{head}... {total:,} {unit}{closing}"
        if text_width(text) <= room:
            return text
    return _cut(f"{opening}... {total:,} {unit}{closing}", room)


# ---- the table -------------------------------------------------------------------------------


def render(table: pa.Table, *, width: int | None = None, footer: str = "") -> str:
    """``table`` as a box of text at most ``width`` characters wide (by default the
    terminal's, else $COLUMNS, else 120)."""
    from vane.types import arrow_to_duckdb

    width = terminal_width(width)
    names = [_clean(name) for name in table.column_names]
    types = [_clean(arrow_to_duckdb(f.type)) for f in table.schema]
    rows = [list(row.values()) for row in table.to_pylist()]
    # What each column takes uncut (no cell can be wider than the table).
    natural = [
        max(text_width(name), text_width(kind), *(text_width(cell(r[i], width)) for r in rows))
        for i, (name, kind) in enumerate(zip(names, types, strict=True))
    ]
    keep = _columns_that_fit([min(n, MIN_CELL) for n in natural], width)
    sizes = _share(natural, keep, width)

    def line(values: list[Any], show: Callable[[Any, int], str]) -> str:
        texts = [show(values[i], n) if i >= 0 else GAP for i, n in zip(keep, sizes, strict=True)]
        return "│ " + " │ ".join(_pad(t, n) for t, n in zip(texts, sizes, strict=True)) + " │"

    rule = ["─" * (n + 2) for n in sizes]
    out = ["┌" + "┬".join(rule) + "┐", line(names, _cut), line(types, _cut)]
    out.append("├" + "┼".join(rule) + "┤")
    out.extend(line(row, cell) for row in rows)
    out.append("└" + "┴".join(rule) + "┘")
    shown = sum(1 for i in keep if i >= 0)
    if shown < len(names):
        footer += f"{', ' if footer else ''}{shown} of {len(names)} columns shown"
    if footer:
        out.append(footer)
    return "\n".join(out)


def _pad(text: str, size: int) -> str:
    return text + " " * (size - text_width(text))


def _columns_that_fit(minimal: list[int], width: int) -> list[int]:
    """Column positions to show, -1 standing for the left-out middle: all if each fits at its
    minimal size, else as many from both ends as fit with the gap column (at least the first,
    cut to what is left)."""
    if sum(m + 3 for m in minimal) + 1 <= width:
        return list(range(len(minimal)))
    used = 1 + len(GAP) + 3  # the frame and the gap column
    left, right = 0, len(minimal) - 1
    keep_left: list[int] = []
    keep_right: list[int] = []
    while left <= right and used + minimal[left] + 3 <= width:
        keep_left.append(left)
        used += minimal[left] + 3
        left += 1
        if left > right or used + minimal[right] + 3 > width:
            break
        keep_right.insert(0, right)
        used += minimal[right] + 3
        right -= 1
    if not keep_left:
        keep_left = [0]
    return [*keep_left, -1, *keep_right]


def _share(natural: list[int], keep: list[int], width: int) -> list[int]:
    """The size of each kept column: the room there is, given to the narrowest first, so
    narrow columns keep their natural size and long ones share the rest evenly."""
    wanted = [natural[i] if i >= 0 else len(GAP) for i in keep]
    room = width - 1 - 3 * len(keep)
    sizes = [0] * len(keep)
    for position in sorted(range(len(keep)), key=lambda k: wanted[k]):
        left = len(keep) - sum(1 for s in sizes if s)  # columns still to size, this one too
        sizes[position] = max(1, min(wanted[position], room // left))
        room -= sizes[position]
    return sizes
