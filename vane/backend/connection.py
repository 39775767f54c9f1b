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


def result_settings() -> dict[str, str]:
    """The settings a cursor of this process's database runs queries with that decide what a
    query gives (its values and their order), by name: a resumable write records them with a
    step's input (``vane/execution/resume.py``). Asked once, as the database opened."""
    return _engine.result_settings()
