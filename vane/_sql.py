"""SQL text helpers shared by every layer that writes SQL for DuckDB (plan, io, execution).

They sit below the plan layer so that io and execution need not import the plan to quote a name
or to quote DuckDB's own error text.
"""

from __future__ import annotations

from collections.abc import Iterable

# DuckDB lists every overload of a function it could not match: dozens of lines that bury the
# sentence that matters.
_NOISE = "Candidate functions:"
_MAX_MESSAGE = 600


def duckdb_message(exc: BaseException) -> str:
    """DuckDB's own text on one line (it names the missing column, the bad token...), without
    its list of candidate overloads, and cut to a readable length."""
    text = str(exc)
    if _NOISE in text:
        text = text[: text.index(_NOISE)].rstrip() + " (candidate functions omitted)"
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def quote_ident(name: str) -> str:
    """A column name as a quoted SQL identifier: any name works, quotes included."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A string as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_list(items: Iterable[str]) -> str:
    return ", ".join(items)
