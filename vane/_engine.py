"""The process-wide embedded DuckDB database.

One in-memory database per process; every unit of work takes its own ``cursor()`` because a DuckDB
connection holds one open result at a time and concurrently streaming steps must not share one.
Short catalog questions (parse a type name, bind a step against empty tables) share one
``scratch()`` cursor instead of opening one each time.

Its settings that decide what a query gives (``RESULT_SETTINGS``) are asked once, on a thread
of their own as the database opens, and kept (``result_settings``): nothing in vane changes
them afterwards (``vane.sql`` refuses SET statements), so a resumable write knows them without
a query of its own. Asking costs a process DuckDB's first call of a function by name (about
2.3 ms, once a process), which the overhead workload's plain write never pays: paid inside a
resumable write, beside its scan, it was most of what resume=True cost there (1.06x, against
1.02x with the settings known). Asked as the database opens, it runs while the plan is built,
on the core that planning leaves idle. A test changes one through ``set_global``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import duckdb

from vane._background import in_background

# Every error DuckDB raises: caught under this name by the modules that ask the database a
# question and may not import DuckDB themselves (``vane.types``; the backend's ``connection``).
Error = duckdb.Error

_lock = threading.Lock()
_connection: duckdb.DuckDBPyConnection | None = None
_settings: Future[dict[str, str]] | None = None

# DuckDB's settings that decide a query's values or their order, rather than its speed: the
# session's time zone and calendar (for times with a zone), how text compares, what ``/``
# means, how results become Arrow, and whether rows keep their order.
RESULT_SETTINGS = (
    "TimeZone",
    "Calendar",
    "default_collation",
    "integer_division",
    "ieee_floating_point_ops",
    "default_null_order",
    "arrow_large_buffer_size",
    "arrow_lossless_conversion",
    "arrow_output_list_view",
    "arrow_output_version",
    "preserve_insertion_order",
    "binary_as_string",
    "enable_geoparquet_conversion",
    "produce_arrow_string_view",
)

# All of them at once, as DuckDB shows them (``duckdb_settings()``'s text): asking the
# settings' table costs 4 ms, evaluating every setting DuckDB has, against 0.7 ms for these.
_RESULT_SETTINGS_QUERY = "SELECT " + ", ".join(
    f"current_setting('{name}')::VARCHAR" for name in RESULT_SETTINGS
)


def cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on the shared database; the caller closes it when its work is done."""
    global _connection, _settings
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
            # (not a daemon: one stopped inside DuckDB as the interpreter exits aborts it)
            asking = _connection.cursor()
            _settings = in_background(lambda: _ask(asking), "vane-settings", daemon=False)
        return _connection.cursor()


def result_settings() -> dict[str, str]:
    """The database's settings that decide what a query gives (``RESULT_SETTINGS``), by name,
    as DuckDB shows them; asked as it opened (waited for here, if still being asked)."""
    if _settings is None:
        cursor().close()  # (the database opened, and its settings asked)
    assert _settings is not None
    return dict(_settings.result())


def set_global(name: str, value: str | None) -> None:
    """Set one of the database's settings (SQL text: ``'UTC'``, ``true``), or with None reset
    it, and ask its settings again: what ``result_settings`` says stays true (tests change
    settings only through here)."""
    global _settings
    opened = cursor()
    try:
        opened.execute(f"RESET GLOBAL {name}" if value is None else f"SET GLOBAL {name} = {value}")
    finally:
        opened.close()
    fresh: Future[dict[str, str]] = Future()
    fresh.set_result(_ask(cursor()))
    _settings = fresh


def _ask(opened: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The settings, asked on the cursor ``opened``, which is closed then."""
    try:
        try:
            values = opened.execute(_RESULT_SETTINGS_QUERY).fetchone()
        except duckdb.CatalogException:
            # (a DuckDB without one of them: those it has, from its table of settings)
            rows = opened.execute(
                "SELECT name, value FROM duckdb_settings() WHERE list_contains(?, name)",
                [list(RESULT_SETTINGS)],
            ).fetchall()
            return {str(name): str(value) for name, value in rows}
    finally:
        opened.close()
    assert values is not None  # (a SELECT without FROM gives one row)
    return dict(zip(RESULT_SETTINGS, (str(value) for value in values), strict=True))


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
