"""The process-wide embedded DuckDB database.

One in-memory database per process; every unit of work takes its own ``cursor()`` because a DuckDB
connection holds one open result at a time and concurrently streaming steps must not share one.
Short catalog questions (parse a type name, bind a step against empty tables) share one
``scratch()`` cursor instead of opening one each time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

_lock = threading.Lock()
_connection: duckdb.DuckDBPyConnection | None = None


def cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on the shared database; the caller closes it when its work is done."""
    global _connection
    with _lock:
        if _connection is None:
            # DuckDB would otherwise download and load extensions (httpfs for a URL, say) on
            # first use: a hang on a machine without internet, and code nobody asked for.
            _connection = duckdb.connect(
                ":memory:",
                config={"autoinstall_known_extensions": False, "autoload_known_extensions": False},
            )
        return _connection.cursor()


_scratch_lock = threading.RLock()  # re-entrant: binding a step may ask a type question
_scratch: duckdb.DuckDBPyConnection | None = None


@contextmanager
def scratch() -> Iterator[duckdb.DuckDBPyConnection]:
    """The shared cursor for quick questions that read no data, held by one thread at a time."""
    global _scratch
    with _scratch_lock:
        if _scratch is None:
            _scratch = cursor()
        yield _scratch
