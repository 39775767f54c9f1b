"""The local runner: the whole plan runs in this process (and the subprocess actors it starts)
on the embedded DuckDB database.

Each action is one ``Execution``: it owns the cursors and UDF stages it opens and closes them
all at the end. Relational steps stream through DuckDB; UDF steps stream through their actor
pools; a UDF step's output feeds the action directly when nothing relational follows it.

A stream (``iter_batches``, iteration) keeps DuckDB away from a UDF step's batches wherever it
can, since DuckDB reads dozens of batches ahead of what it returns: the row-local steps and
limits above a UDF step run on its batches as they come (``row_steps.streamed``), and its
batches reach the caller as they are produced, those already in hand gathered, none waited for.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

from vane._arrow import exact_batches, gathered, one_batch
from vane._sql import duckdb_message
from vane.backend import connection
from vane.backend.connection import Cursor, Relation
from vane.backend.lowering import lower
from vane.config import get_config
from vane.errors import ExecutionError, VaneError
from vane.execution.caller import Caller
from vane.execution.inference import learn_schemas
from vane.execution.interrupt import Cancellation, cancelled_by_sigint
from vane.execution.ledger import Ledger
from vane.execution.lowering import row_caps
from vane.execution.row_steps import streamed
from vane.execution.runner import action_events
from vane.execution.totals import stage_totals
from vane.io.commit import abort_unfinished, writes_started
from vane.io.spool import Spool
from vane.observe.events import StageFinished
from vane.plan.explain import explain
from vane.plan.nodes import FileScan, Limit, MaterializedScan, PlanNode, SqlStep, UdfStep
from vane.plan.optimizer import optimize
from vane.plan.traverse import shared_subplans, walk
from vane.udf.spec import UdfSpec, output_schema

if TYPE_CHECKING:
    from vane.execution.resume import Checkpoint
    from vane.execution.stage import UdfStage
    from vane.io.parts import Parts
    from vane.io.resume import Resume, ResumeStore
    from vane.io.sinks import FileSink, Sink, WriteResult


class Execution:
    """The resources of one action, released together by ``close``. A ``streaming`` action's
    reader may stop at any batch, and waits for each (see ``reader``)."""

    def __init__(self, plan: PlanNode, *, streaming: bool = False) -> None:
        self.plan = plan
        self.streaming = streaming
        self.events = action_events()
        # Each UDF step's summary, as its stage ends (for WriteResult.steps and explain).
        self.finished: list[StageFinished] = []
        self.events.subscribe(self._summary)
        self._cursors: list[Cursor] = []
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
        # The rows each UDF step will read, where that is certain (for the progress display).
        self._totals = stage_totals(plan, self._caps)
        # Each UDF stage and its stream, closed with the action if a reader left it unfinished.
        self._stages: list[tuple[UdfStage, Generator[pa.RecordBatch, None, None]]] = []
        # Where the action's warnings are shown: the user's line that started it.
        self.caller = Caller()
        # A resumable write's saved work, which its UDF stages answer batches from.
        self.resume: ResumeStore | None = None
        # A write's error ledger (errors_to=), which its UDF stages record failed rows in.
        self.ledger: Ledger | None = None
        # A resumable write's output, which may be kept in parts cut after this UDF step's
        # answers (``resume.parts_step``), and its sink; and those parts, made as the step's
        # stage begins, where its batches are known by their place in its input.
        self.parts_after: tuple[UdfStep, FileSink] | None = None
        self.parts: Parts | None = None

    def _summary(self, event: object) -> None:
        if isinstance(event, StageFinished):
            self.finished.append(event)

    def cursor(self) -> Cursor:
        cursor = connection.cursor()
        self._cursors.append(cursor)
        self.cancellation.on_cancel(cursor.interrupt)
        return cursor

    def relation(self, node: PlanNode, cursor: Cursor | None = None) -> Relation:
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
        self, node: PlanNode, batch_size: int, *, fill: bool = False
    ) -> pa.RecordBatchReader:
        """A stream of ``node``'s rows; a UDF step's batches come straight from its pool. In a
        streaming action, row-local steps and limits over a UDF step run on its batches as they
        come: DuckDB would read far ahead of the reader (hundreds of thousands of rows, or a
        small job's every row before the first is returned), paying for rows nobody reads,
        failing on them, and keeping the first rows from the reader until then. With ``fill``
        (a reader that waits for ``batch_size`` rows anyway) and no limit among them, they run
        on ``batch_size`` of the UDF step's rows at a time: DuckDB's cost (about 2 ms a query)
        is paid less often, and a reader waits no longer for rows that steps which keep or
        drop rows make from as many (an ``unnest`` may fill it sooner)."""
        scan = self.spooled(node)
        if scan is not None:
            return scan.spool.reader(batch_size)
        if isinstance(node, UdfStep):
            return self.udf_reader(node)
        found = self._streamed_chain(node) if self.streaming else None
        if found is None:
            return self.relation(node).to_arrow_reader(batch_size)
        chain, udf = found
        limited = any(isinstance(step, Limit) for step in chain)  # it may need far fewer rows
        tables = self._per_block(chain, udf, batch_size, fill=fill and not limited)
        batches = (batch for table in tables for batch in table.to_batches() if batch.num_rows)
        return pa.RecordBatchReader.from_batches(node.schema, batches)

    def produced(self, node: PlanNode) -> Iterator[pa.RecordBatch]:
        """``node``'s rows as they are produced (a stream with no batch size asked): a UDF
        step's answers, and the steps above it run on them, are handed on as each comes, those
        already in hand together (up to the configured batch size); DuckDB's own steps give
        their batches as DuckDB returns them."""
        found = self._streamed_chain(node)
        if found is None:
            yield from (
                batch for batch in self.reader(node, get_config().batch_size) if batch.num_rows
            )
            return
        for table in self._per_block(*found, get_config().batch_size, fill=False):
            batches = [batch for batch in table.to_batches() if batch.num_rows]
            if batches:
                yield one_batch(batches)

    def _streamed_chain(self, node: PlanNode) -> tuple[list[PlanNode], UdfStep] | None:
        """The row-local SQL steps and limits from ``node`` down to the UDF step they read
        (bottom step first; none if ``node`` is that step), when nothing on the way is read by
        another part of the plan."""
        chain: list[PlanNode] = []
        while (
            isinstance(node, SqlStep)
            and (node.row_local or isinstance(node, Limit))
            and id(node) not in self._read_twice
        ):
            chain.append(node)
            node = node.inputs[0]
        if not isinstance(node, UdfStep) or id(node) in self._read_twice:
            return None
        return chain[::-1], node

    def _per_block(
        self, chain: list[PlanNode], udf: UdfStep, max_rows: int, *, fill: bool
    ) -> Iterator[pa.Table]:
        """``chain`` run on blocks of the UDF step's batches: each block the batches already in
        hand (a DuckDB query per batch would cost its overhead, about 2 ms, on every batch of a
        quick function), or with ``fill`` as many as it takes, up to ``max_rows`` rows."""
        stage, stream = self._udf_stream(udf)
        in_hand = (lambda: True) if fill else stage.in_hand
        blocks = (
            pa.Table.from_batches(group, udf.schema)
            for group in gathered(stream, in_hand, max_rows)
        )
        return streamed(chain, udf.schema, blocks)

    def udf_reader(self, node: UdfStep) -> pa.RecordBatchReader:
        _, stream = self._udf_stream(node)
        return pa.RecordBatchReader.from_batches(node.schema, stream)

    def _udf_stream(self, node: UdfStep) -> tuple[UdfStage, Iterator[pa.RecordBatch]]:
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
            total_rows=self._totals.get(id(node)),
            checkpoint=(None if self.resume is None else self._checkpoint(self.resume, node)),
            ledger=None if self.ledger is None else self.ledger.recorder(node),
        )
        stream = self._guard(stage.batches())
        self._stages.append((stage, stream))
        return stage, stream

    def _checkpoint(self, store: ResumeStore, node: UdfStep) -> Checkpoint:
        # (a write's modules load with the write, not with every action: a first result's)
        from vane.execution.resume import Checkpoint, input_identity, parts_held, step_key
        from vane.io.parts import Parts

        identity = input_identity(node.input)
        parts = None
        if identity is not None and self.parts_after is not None and self.parts_after[0] is node:
            held = parts_held(self.plan, node, identity)
            parts = self.parts = Parts(store.path, self.parts_after[1], held, store.make)
        return Checkpoint(store, step_key(node), identity, parts, paid=node.udf.is_async)

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


_TRANSLATED = (connection.Error, pa.ArrowException, OSError, VaneError)


@contextmanager
def _action(
    plan: PlanNode, *, streaming: bool = False, handed_out: bool = False
) -> Iterator[Execution]:
    """One action's execution: the single door for its errors, which are translated (a Ctrl-C
    becomes ``KeyboardInterrupt``, whatever DuckDB or Arrow made of it), and its resources are
    always released."""
    learn_schemas(plan)
    _prestart(plan)
    execution = Execution(plan, streaming=streaming)
    failed = True
    writes = writes_started(handed_out=handed_out)  # (a stream's reader may let go of it late)
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
        try:
            abort_unfinished(writes)  # a write whose cleanup a Ctrl-C cut short
        except KeyboardInterrupt:  # (a second Ctrl-C as it began: commit.abort_surely)
            abort_unfinished(writes)
            raise
        finally:
            execution.close(failed=failed)


def _prestart(plan: PlanNode) -> None:
    """Start the worker processes the plan's subprocess steps will need now (unless idle ones
    will do, such as those ``check`` started as the steps were built), so that they start
    (about 0.4 s: an interpreter and its imports) while the action opens its input and DuckDB
    plans, not when the first batch reaches the step (``actors/warm.py``)."""
    _prestart_steps([(node.udf, node.udf.name) for node in walk(plan) if isinstance(node, UdfStep)])


def _prestart_steps(steps: list[tuple[UdfSpec, str]]) -> None:
    # Only with the warm pool on: a worker started early waits there, idle, for its stage;
    # with worker_idle_timeout_s=0 workers start with their stage and end with their action.
    subprocess = any(spec.backend.startswith("subprocess") for spec, _ in steps)
    if subprocess and get_config().worker_idle_timeout_s > 0:
        from vane.execution.actors import prestart_workers  # actor pools load lazily

        prestart_workers(steps)


def _interrupted_in_duckdb(exc: BaseException) -> bool:
    """DuckDB checks for signals as it runs a query on the main thread: on a Ctrl-C it runs
    Python's handler itself and answers with an error of its own, often before the watcher
    thread (``interrupt.py``) has marked the action cancelled."""
    return isinstance(exc, connection.Interrupted) or (
        type(exc) is RuntimeError and str(exc) == "Query interrupted"
    )


class LocalRunner:
    """Each action optimizes the plan, then runs it in one ``Execution``."""

    name = "local"

    def check(self, plan: PlanNode) -> None:
        """Every UDF step's GPUs, cores and memory against this machine, before anything runs.
        ``plan`` is a step just built: if its function runs in worker processes, they start
        now, while the rest of the plan is built (``_prestart``)."""
        from vane.execution.resources import check_resources

        for node in walk(plan):
            if isinstance(node, UdfStep):
                check_resources(node.udf, node.udf.name)
        if isinstance(plan, UdfStep):
            _prestart_steps([(plan.udf, plan.udf.name)])

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

    def stream(self, plan: PlanNode, batch_size: int | None) -> Iterator[pa.RecordBatch]:
        """Record batches as they are produced, or with ``batch_size`` of exactly that many rows
        (the last may be shorter): DuckDB's and a UDF's batches have sizes of their own (a
        file's rows, a row group's), so they are cut with zero-copy slices and joined at the
        seams. Nothing is computed far ahead of the reader, who may stop at any batch."""
        plan = optimize(plan)
        with _action(plan, streaming=True, handed_out=True) as execution:
            if batch_size is None:
                yield from execution.produced(plan)
            else:
                reader = execution.reader(plan, batch_size, fill=True)
                yield from exact_batches(reader, batch_size)

    def materialize(self, plan: PlanNode) -> MaterializedScan:
        return materialized(plan, self._all_batches(plan))

    def _all_batches(self, plan: PlanNode) -> Iterator[pa.RecordBatch]:
        plan = optimize(plan)
        size = get_config().batch_size
        # Every row is read: DuckDB may run ahead. (A generator: dropped unfinished, it may end
        # late, as a stream does.)
        with _action(plan, handed_out=True) as execution:
            yield from exact_batches(execution.reader(plan, size), size)

    def write(
        self,
        plan: PlanNode,
        sink: Sink,
        *,
        resume: Resume | None = None,
        errors_to: str | None = None,
        errors_key: tuple[str, ...] | None = None,
    ) -> WriteResult:
        # Timed from the call to the action's end: the rows are computed as they are read,
        # DuckDB runs ahead of its reader (a small input's UDF steps run to their end before
        # the first row is written), and a stage that a `limit` left unfinished ends last.
        started = time.perf_counter()
        # What a Ctrl-C in the write's start leaves begun (the resume store's lock), let go.
        writes = writes_started()
        try:
            return self._write(plan, sink, started, resume, errors_to, errors_key)
        finally:
            try:
                abort_unfinished(writes)
            except KeyboardInterrupt:  # (a second Ctrl-C as it began: commit.abort_surely)
                abort_unfinished(writes)
                raise

    def _write(  # noqa: PLR0917 - private; write() names every argument
        self,
        plan: PlanNode,
        sink: Sink,
        started: float,
        resume: Resume | None,
        errors_to: str | None,
        errors_key: tuple[str, ...] | None,
    ) -> WriteResult:
        from vane.execution.resume import parts_step
        from vane.execution.write_setup import prepare_write
        from vane.io.sinks import write_to

        caller = f"write_{getattr(sink, 'format', 'table')}"
        sink.check_schema(plan.schema)
        plan = optimize(plan)
        _prestart(plan)  # (before the resume store and the ledger are opened)
        sink, ledger, store = prepare_write(
            plan, sink, caller, resume=resume, errors_to=errors_to, errors_key=errors_key
        )
        cut_after = parts_step(plan, sink) if store is not None and ledger is None else None
        try:
            # With parts, the steps over the UDF step run on its rows as they come (a streaming
            # action's reader), so that its answers reach the parts as they come, not once
            # DuckDB has read far ahead.
            with _action(plan, streaming=cut_after is not None) as execution:
                execution.resume = store
                execution.ledger = ledger
                execution.parts_after = cut_after
                reader = execution.reader(plan, get_config().batch_size, fill=True)
                parts = execution.parts  # (made as the reader began)
                committed = write_to(sink, reader, None if parts is None else parts.write)
        finally:
            if store is not None:
                store.close()  # its logs (a failed job's answers stay kept for the rerun)
        if store is not None:
            store.finish()  # the output holds every row: the saved work has served
        # After the action's end, where a stage that a `limit` left unfinished says its summary.
        return committed.result(time.perf_counter() - started, tuple(execution.finished))


def materialized(plan: PlanNode, batches: Iterator[pa.RecordBatch]) -> MaterializedScan:
    """``plan``'s rows (``batches``, streamed by a runner), kept for any number of later reads."""
    return MaterializedScan(Spool.collect(pa.RecordBatchReader.from_batches(plan.schema, batches)))
