"""Tables as text for ``Relation.show()`` and the ``vane`` command: DuckDB's box style, with
long values cut short (a 384-float vector shows its first items and its length, long text its
start and its length) and, when the table is wider than the terminal, the middle columns left
out as DuckDB does."""

from __future__ import annotations

import shutil
from typing import Any

import pyarrow as pa

MAX_CELL = 32  # characters a cell shows
MAX_ITEMS = 3  # items of a list or a struct shown before "..."


def cell(value: Any) -> str:
    """One value as a short line."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        if len(value) <= MAX_ITEMS:
            return _cut("[" + ", ".join(cell(v) for v in value) + "]")
        for count in range(MAX_ITEMS, 0, -1):  # as many items as fit, and always the length
            text = "[" + ", ".join(cell(v) for v in value[:count]) + f", ... {len(value)} items]"
            if len(text) <= MAX_CELL:
                return text
        return f"[... {len(value)} items]"
    if isinstance(value, dict):
        items = list(value.items())
        shown = ", ".join(f"{k}: {cell(v)}" for k, v in items[:MAX_ITEMS])
        return _cut("{" + shown + (", ..." if len(items) > MAX_ITEMS else "") + "}")
    if isinstance(value, (bytes, bytearray)):
        return _cut(repr(bytes(value)), size=len(value), unit="bytes")
    original = str(value)
    return _cut(" ".join(original.split()), size=len(original), unit="chars")


def _cut(text: str, size: int | None = None, unit: str = "") -> str:
    if len(text) <= MAX_CELL:
        return text
    tail = f"... ({size:,} {unit})" if size is not None else "..."
    return text[: max(8, MAX_CELL - len(tail))] + tail


def render(table: pa.Table, *, width: int | None = None, footer: str = "") -> str:
    """``table`` as a box of text at most ``width`` characters wide (the terminal's)."""
    from vane.types import arrow_to_duckdb

    width = width or shutil.get_terminal_size((120, 20)).columns
    names = table.column_names
    types = [arrow_to_duckdb(f.type) for f in table.schema]
    rows = [[cell(v) for v in row.values()] for row in table.to_pylist()]
    widths = [
        max(len(name), len(kind), *(len(row[i]) for row in rows))
        for i, (name, kind) in enumerate(zip(names, types, strict=True))
    ]
    keep = _columns_that_fit(widths, width)
    sizes = [widths[i] if i >= 0 else 1 for i in keep]

    def line(values: list[str]) -> str:
        shown = [values[i] if i >= 0 else "…" for i in keep]
        return "│ " + " │ ".join(v.ljust(n) for v, n in zip(shown, sizes, strict=True)) + " │"

    rule = ["─" * (n + 2) for n in sizes]
    out = ["┌" + "┬".join(rule) + "┐", line(names), line(types), "├" + "┼".join(rule) + "┤"]
    out.extend(line(row) for row in rows)
    out.append("└" + "┴".join(rule) + "┘")
    if footer:
        out.append(footer)
    return "\n".join(out)


def _columns_that_fit(widths: list[int], width: int) -> list[int]:
    """Column positions to show, -1 standing for the left-out middle."""
    total = sum(w + 3 for w in widths) + 1
    if total <= width or len(widths) <= 2:
        return list(range(len(widths)))
    left, right = 0, len(widths) - 1
    used = 1 + 4  # the frame and the "…" column
    keep_left: list[int] = []
    keep_right: list[int] = []
    while left <= right:
        if used + widths[left] + 3 > width:
            break
        keep_left.append(left)
        used += widths[left] + 3
        left += 1
        if left > right or used + widths[right] + 3 > width:
            break
        keep_right.insert(0, right)
        used += widths[right] + 3
        right -= 1
    return [*keep_left, -1, *keep_right] if left <= right else [*keep_left, *keep_right]
