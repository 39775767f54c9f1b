"""The local runner: the whole plan runs in this process on the embedded DuckDB database.

Each action takes its own cursor (one open result per cursor), lowers the plan onto it, and
streams: nothing is materialized unless the action asks for a table.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from vane import _engine
from vane.errors import ExecutionError, VaneError
from vane.execution.lowering import lower
from vane.io.sinks import FileSink, WriteResult
from vane.plan.explain import explain
from vane.plan.nodes import PlanNode, duckdb_message


@contextmanager
def _running(plan: PlanNode) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor for one action; DuckDB errors raised while it runs become ``ExecutionError``."""
    cursor = _engine.cursor()
    try:
        yield cursor
    except VaneError:
        raise
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        # DuckDB's errors reach us directly, or through an Arrow stream as Arrow/OS errors.
        raise ExecutionError(
            f"running the plan failed: {duckdb_message(exc)}\nplan:\n{explain(plan)}"
        ) from exc
    finally:
        cursor.close()


class LocalRunner:
    name = "local"

    def to_arrow(self, plan: PlanNode) -> pa.Table:
        with _running(plan) as cursor:
            table: pa.Table = lower(plan, cursor).to_arrow_table()
        return table

    def count(self, plan: PlanNode) -> int:
        with _running(plan) as cursor:
            rows = lower(plan, cursor).aggregate("count(*)").fetchall()
        return int(rows[0][0])

    def stream(self, plan: PlanNode, batch_size: int) -> Iterator[pa.RecordBatch]:
        """Record batches of up to ``batch_size`` rows, produced as they are read."""
        with _running(plan) as cursor:
            reader = lower(plan, cursor).to_arrow_reader(batch_size)
            yield from reader

    def write(self, plan: PlanNode, sink: FileSink) -> WriteResult:
        sink.check_schema(plan.schema)
        with _running(plan) as cursor:
            return sink.write(lower(plan, cursor), cursor, _engine.cursor)
