"""The process-wide embedded DuckDB database.

One in-memory database per process; every unit of work takes its own ``cursor()`` because a DuckDB
connection holds one open result at a time and concurrently streaming steps must not share one.
"""

from __future__ import annotations

import threading

import duckdb

_lock = threading.Lock()
_connection: duckdb.DuckDBPyConnection | None = None


def cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on the shared database; the caller closes it when its work is done."""
    global _connection
    with _lock:
        if _connection is None:
            _connection = duckdb.connect(":memory:")
        return _connection.cursor()
