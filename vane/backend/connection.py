"""DuckDB as the rest of vane holds it: cursors on the process's database, the types of a
cursor and of the relations lowered onto it, and DuckDB's errors, which callers catch to
translate into vane's at their door. Of the backend, only this module imports DuckDB; above
the backend nothing does (the import contract in pyproject.toml): what a runner or the CLI
needs of DuckDB is named here.
"""

from __future__ import annotations

import duckdb

from vane import _engine
from vane._sql import duckdb_message
from vane.errors import ExecutionError

VERSION: str = duckdb.__version__
Cursor = duckdb.DuckDBPyConnection
Relation = duckdb.DuckDBPyRelation
# Every error DuckDB raises (for modules below the backend, ``vane._engine.Error``, the same).
Error = _engine.Error
# What DuckDB raises for a query it stopped on Ctrl-C (``Cursor.interrupt`` or a signal).
Interrupted = duckdb.InterruptException


def cursor() -> Cursor:
    """A new cursor on the process's database; the caller closes it when its work is done."""
    return _engine.cursor()


def query_plan(query: str) -> str:
    """DuckDB's plan for ``query``, one box per operator (``vane explain``)."""
    opened = cursor()
    try:
        return str(opened.sql(query).explain()).rstrip()
    except Error as exc:
        raise ExecutionError(f"explaining the query failed: {duckdb_message(exc)}") from exc
    finally:
        opened.close()


# DuckDB's settings that decide a query's values or their order, rather than its speed: the
# session's time zone and calendar (for times with a zone), how text compares, what ``/``
# means, how results become Arrow, and whether rows keep their order.
_RESULT_SETTINGS = (
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
    f"current_setting('{name}')::VARCHAR" for name in _RESULT_SETTINGS
)


def result_settings() -> dict[str, str]:
    """The settings a cursor of this process's database runs queries with that decide what a
    query gives (its values and their order), by name: a resumable write records them with a
    step's input (``vane/execution/resume.py``)."""
    opened = cursor()
    try:
        try:
            values = opened.execute(_RESULT_SETTINGS_QUERY).fetchone()
        except duckdb.CatalogException:
            # (a DuckDB without one of them: those it has, from its table of settings)
            rows = opened.execute(
                "SELECT name, value FROM duckdb_settings() WHERE list_contains(?, name)",
                [list(_RESULT_SETTINGS)],
            ).fetchall()
            return {str(name): str(value) for name, value in rows}
    finally:
        opened.close()
    assert values is not None  # (a SELECT without FROM gives one row)
    return dict(zip(_RESULT_SETTINGS, (str(value) for value in values), strict=True))
