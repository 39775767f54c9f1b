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

# Every error DuckDB raises: caught under this name by the modules that ask the database a
# question and may not import DuckDB themselves (``vane.types``; the backend's ``connection``).
Error = duckdb.Error

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
            # A Parquet scan prefetches row groups ahead of its reader into DuckDB's file
            # cache: up to ~160 MB of them when the reader is slower than the scan, as a UDF
            # is (measured on 1M-row row groups: peak 304 MB at 2M rows, 500 MB at 20M).
            # Streaming holds only the rows in flight; on local files the scan is as fast
            # without it. (A setting of the Parquet extension: not accepted by connect().)
            _connection.execute("SET GLOBAL disable_parquet_prefetching = true")
            # DuckDB keeps what it read of a remote file (vane's object stores are remote to
            # it) in its external file cache until the query ends: the store pipeline's peak
            # grew with every object read, 370 MiB over one object to 530 MiB over ten (83 MiB
            # of it this cache), and 345 to 375 MiB without it, as fast. A rerun of a query
            # reads the objects again, as every engine without a cache does.
            _connection.execute("SET GLOBAL enable_external_file_cache = false")
        return _connection.cursor()


def database_id() -> int:
    """Which database this process's cursors share (a filesystem registered with it serves
    them all)."""
    cursor().close()
    return id(_connection)


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
