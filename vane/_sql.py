"""SQL text helpers shared by every layer that writes SQL for DuckDB (plan, io, execution).

They sit below the plan layer so that io and execution need not import the plan to quote a name
or to quote DuckDB's own error text.
"""

from __future__ import annotations

from collections.abc import Iterable


def duckdb_message(exc: BaseException) -> str:
    """DuckDB's own text on one line (it names the missing column, the bad token...)."""
    return " ".join(str(exc).split())


def quote_ident(name: str) -> str:
    """A column name as a quoted SQL identifier: any name works, quotes included."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A string as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_list(items: Iterable[str]) -> str:
    return ", ".join(items)
