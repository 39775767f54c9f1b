"""The local runner: the whole plan runs in this process (and the subprocess actors it starts)
on the embedded DuckDB database.

Each action is one ``Execution``: it owns the cursors and UDF stages it opens and closes them
all at the end. Relational steps stream through DuckDB; UDF steps stream through their actor
pools; a UDF step's output feeds the action directly when nothing relational follows it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from vane import _engine
from vane._arrow import exact_batches
from vane._sql import duckdb_message
from vane.config import get_config
from vane.errors import ExecutionError, VaneError
from vane.execution.caller import Caller
from vane.execution.interrupt import Cancellation, cancelled_by_sigint
from vane.execution.lowering import lower, row_caps
from vane.execution.row_steps import BlockSql, reroot
from vane.io.sinks import FileSink, WriteResult, write_to
from vane.io.spool import Spool
from vane.observe.events import StageFinished, action_events
from vane.plan.explain import explain
from vane.plan.nodes import FileScan, MaterializedScan, PlanNode, SqlStep, UdfStep
from vane.plan.optimizer import optimize
from vane.plan.traverse import shared_subplans, walk
from vane.udf.spec import output_schema

if TYPE_CHECKING:
    from vane.execution.stage import UdfStage


class Execution:
    """The resources of one action, released together by ``close``."""

    def __init__(self, plan: PlanNode) -> None:
        self.plan = plan
        self.events = action_events()
        # Each UDF step's summary, as its stage ends (for WriteResult.steps and explain).
        self.finished: list[StageFinished] = []
        self.events.subscribe(self._summary)
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        # Subplans two parts of the plan read, computed once for this action and kept.
        self._shared = shared_subplans(plan)
        self._read_twice = frozenset(self._shared)  # (_shared forgets each once computed)
        self._spools: dict[int, MaterializedScan] = {}
        # The first error a UDF stage raised: DuckDB reports errors from an Arrow stream it
        # reads as its own text, so the original (with its cause) is kept here to re-raise.
        self.failure: BaseException | None = None
        # Ctrl-C: every stage aborts its pool and every cursor is interrupted.
        self.cancellation = Cancellation()
        # The rows a `limit` needs from a UDF step (by node identity): its stream ends there.
        self._caps = row_caps(plan)
        # Each UDF stage and its stream, closed with the action if a reader left it unfinished.
        self._stages: list[tuple[UdfStage, Generator[pa.RecordBatch, None, None]]] = []
        # Where the action's warnings are shown: the user's line that started it.
        self.caller = Caller()

    def _summary(self, event: object) -> None:
        if isinstance(event, StageFinished):
            self.finished.append(event)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cursor = _engine.cursor()
        self._cursors.append(cursor)
        self.cancellation.on_cancel(cursor.interrupt)
        return cursor

    def relation(
        self, node: PlanNode, cursor: duckdb.DuckDBPyConnection | None = None
    ) -> duckdb.DuckDBPyRelation:
        """``node`` lowered onto ``cursor`` (a new one by default)."""
        return lower(node, cursor or self.cursor(), self)

    def spooled(self, node: PlanNode) -> MaterializedScan | None:
        """For a shared subplan, its rows: computed in full the first time it is asked for,
        kept (spilling past the memory budget), and read from there by every reader."""
        key = id(node)
        if key in self._spools:
            return self._spools[key]
        if key not in self._shared:
            return None
        self._shared.discard(key)  # the one computation below reads it plainly
        scan = MaterializedScan(Spool.collect(self.reader(node, get_config().batch_size)))
        self._spools[key] = scan
        return scan

    def reader(
        self, node: PlanNode, batch_size: int, *, lazy: bool = False
    ) -> pa.RecordBatchReader:
        """A stream of ``node``'s rows; a UDF step's batches come straight from its pool. With
        ``lazy`` (a reader that may stop at any batch), row-local steps over a UDF step run on
        its batches as they are read: DuckDB would run the step far ahead of the reader
        (hundreds of thousands of rows), paying for rows nobody reads and failing on them."""
        scan = self.spooled(node)
        if scan is not None:
            return scan.spool.reader(batch_size)
        if isinstance(node, UdfStep):
            return self.udf_reader(node)
        chain = self._row_local_chain(node) if lazy else None
        if chain is not None:
            return self._per_block(node, *chain, batch_size)
        return self.relation(node).to_arrow_reader(batch_size)

    def _row_local_chain(self, node: PlanNode) -> tuple[list[PlanNode], UdfStep] | None:
        """The row-local SQL steps from ``node`` down to the UDF step they read (bottom step
        first), when nothing on the way is read by another part of the plan."""
        chain: list[PlanNode] = []
        while isinstance(node, SqlStep) and node.row_local and id(node) not in self._read_twice:
            chain.append(node)
            node = node.inputs[0]
        if not chain or not isinstance(node, UdfStep) or id(node) in self._read_twice:
            return None
        return chain[::-1], node

    def _per_block(
        self, node: PlanNode, chain: list[PlanNode], udf: UdfStep, batch_size: int
    ) -> pa.RecordBatchReader:
        """``chain`` run on blocks of the UDF step's batches, each gathered up to the reader's
        ``batch_size`` rows (no further: the reader asks for that many at once anyway); a
        query per UDF batch would cost a DuckDB query's overhead every thousand rows."""
        top, bottom = reroot(chain, udf.schema)
        steps = BlockSql(top, bottom)
        udf_batches = self.udf_reader(udf)

        def blocks() -> Iterator[pa.Table]:
            pending: list[pa.RecordBatch] = []
            rows = 0
            for batch in udf_batches:
                pending.append(batch)
                rows += batch.num_rows
                if rows >= batch_size:
                    yield pa.Table.from_batches(pending, udf.schema)
                    pending, rows = [], 0
            if pending:
                yield pa.Table.from_batches(pending, udf.schema)

        def batches() -> Iterator[pa.RecordBatch]:
            for block in blocks():
                yield from (out for out in steps(block).to_batches() if out.num_rows)

        return pa.RecordBatchReader.from_batches(node.schema, batches())

    def udf_reader(self, node: UdfStep) -> pa.RecordBatchReader:
        from vane.execution.stage import UdfStage  # actor pools load lazily

        spec = node.udf
        # DuckDB streams large batches most cheaply; the stage cuts them to the UDF's batch size.
        source = self.reader(node.input, max(spec.rows_per_batch, get_config().batch_size))
        udf_schema = output_schema(spec, node.declared_schema)
        stage = UdfStage(
            spec,
            udf_schema=udf_schema,
            schema=node.schema,
            step=spec.name,
            step_id=node.step_id,
            source=source,
            events=self.events,
            cancellation=self.cancellation,
            warn=self.caller.warn,
            limit=self._caps.get(id(node)),
        )
        stream = self._guard(stage.batches())
        self._stages.append((stage, stream))
        return pa.RecordBatchReader.from_batches(node.schema, stream)

    def _guard(self, batches: Iterator[pa.RecordBatch]) -> Generator[pa.RecordBatch, None, None]:
        try:
            yield from batches
        except Exception as exc:  # not GeneratorExit: DuckDB closing the stream is no failure
            if self.failure is None:
                self.failure = exc
            raise

    def translate(self, exc: BaseException) -> BaseException:
        """The error to show for ``exc``: a UDF stage's own error if one failed, a vane error as
        it is, and DuckDB's or Arrow's wrapped with the plan."""
        if self.failure is not None:
            return self.failure
        if isinstance(exc, VaneError):
            return exc
        for gone in (n.vanished() for n in walk(self.plan) if isinstance(n, FileScan)):
            if gone is not None:
                gone.__cause__ = exc
                return gone
        error = ExecutionError(
            f"running the plan failed: {duckdb_message(exc)}\nplan:\n{explain(self.plan)}"
        )
        error.__cause__ = exc
        return error

    def close(self, *, failed: bool) -> None:
        """Release everything the action opened. A UDF stage whose stream was left unfinished
        (a ``break`` out of ``iter_batches``, DuckDB done with a ``limit``) ends here: early
        and gracefully, its actors running teardown(), unless the action ``failed`` (then its
        pool is aborted)."""
        if failed:  # before the cursors go: closing one may end a stage's stream
            for stage, _ in self._stages:
                stage.abandoned = True
        for cursor in self._cursors:
            cursor.close()
        self._cursors.clear()
        for _, stream in self._stages:
            # ValueError: it runs on another thread (a DuckDB thread still unwinding), and ends
            # there.
            with contextlib.suppress(ValueError):
                stream.close()
        self._stages.clear()
        for scan in self._spools.values():
            scan.spool.close()
        self._spools.clear()
        self.events.close()


_TRANSLATED = (duckdb.Error, pa.ArrowException, OSError, VaneError)


@contextmanager
def _action(plan: PlanNode) -> Iterator[Execution]:
    """One action's execution: the single door for its errors, which are translated (a Ctrl-C
    becomes ``KeyboardInterrupt``, whatever DuckDB or Arrow made of it), and its resources are
    always released."""
    execution = Execution(plan)
    failed = True
    try:
        with cancelled_by_sigint(execution.cancellation):
            yield execution
        failed = False
    except GeneratorExit:
        failed = False  # a stream closed early: no failure
        raise
    except BaseException as exc:
        if (execution.cancellation.cancelled or _interrupted_in_duckdb(exc)) and not isinstance(
            exc, KeyboardInterrupt
        ):
            raise KeyboardInterrupt from None
        if not isinstance(exc, _TRANSLATED):
            raise
        error = execution.translate(exc)
        if error is exc:
            raise
        raise error from error.__cause__
    finally:
        execution.close(failed=failed)


def _interrupted_in_duckdb(exc: BaseException) -> bool:
    """DuckDB checks for signals as it runs a query on the main thread: on a Ctrl-C it runs
    Python's handler itself and answers with an error of its own, often before the watcher
    thread (``interrupt.py``) has marked the action cancelled."""
    return isinstance(exc, duckdb.InterruptException) or (
        type(exc) is RuntimeError and str(exc) == "Query interrupted"
    )


class LocalRunner:
    """Each action optimizes the plan, then runs it in one ``Execution``."""

    name = "local"

    def check(self, plan: PlanNode) -> None:
        """Every UDF step's GPUs, cores and memory against this machine, before anything runs."""
        from vane.execution.resources import check_resources

        for node in walk(plan):
            if isinstance(node, UdfStep):
                check_resources(node.udf, node.udf.name)

    def placement(self, plan: PlanNode) -> dict[int, str]:
        return {}  # everything runs here: explain() shows the plan as it is

    def to_arrow(self, plan: PlanNode) -> pa.Table:
        plan = optimize(plan)
        with _action(plan) as execution:
            if isinstance(plan, UdfStep):
                return execution.udf_reader(plan).read_all()
            table: pa.Table = execution.relation(plan).to_arrow_table()
            return table

    def count(self, plan: PlanNode) -> int:
        plan = optimize(plan)
        with _action(plan) as execution:
            rows = execution.relation(plan).aggregate("count(*)").fetchall()
            return int(rows[0][0])

    def stream(self, plan: PlanNode, batch_size: int) -> Iterator[pa.RecordBatch]:
        """Record batches of exactly ``batch_size`` rows (the last may be shorter), produced as
        they are read: DuckDB's and a UDF's batches have sizes of their own (a file's rows, a
        row group's), so they are cut with zero-copy slices and joined at the seams. Nothing is
        computed far ahead of the reader, who may stop at any batch."""
        return self._stream(plan, batch_size, lazy=True)

    def _stream(self, plan: PlanNode, batch_size: int, *, lazy: bool) -> Iterator[pa.RecordBatch]:
        plan = optimize(plan)
        with _action(plan) as execution:
            yield from exact_batches(execution.reader(plan, batch_size, lazy=lazy), batch_size)

    def materialize(self, plan: PlanNode) -> MaterializedScan:
        # every row is read: DuckDB may run ahead
        return materialized(plan, self._stream(plan, get_config().batch_size, lazy=False))

    def write(self, plan: PlanNode, sink: FileSink) -> WriteResult:
        sink.check_schema(plan.schema)
        plan = optimize(plan)
        with _action(plan) as execution:
            result = write_to(sink, execution.reader(plan, get_config().batch_size))
        # After the action's end, where a stage that a `limit` left unfinished says its summary.
        return replace(result, steps=tuple(execution.finished))


def materialized(plan: PlanNode, batches: Iterator[pa.RecordBatch]) -> MaterializedScan:
    """``plan``'s rows (``batches``, streamed by a runner), kept for any number of later reads."""
    return MaterializedScan(Spool.collect(pa.RecordBatchReader.from_batches(plan.schema, batches)))
