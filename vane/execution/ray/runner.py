"""The Ray runner: the same plan, lowered onto Ray Data (``lowering.py``), with UDF steps on
Ray actors that host vane's actor body (``actor.py``). Writes stage part files from Ray tasks
and commits them from the driver with the same all-or-nothing protocol as the local runner.
See docs/ray.md."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from vane._arrow import exact_batches
from vane.config import get_config
from vane.errors import ActorDiedError, VaneError
from vane.execution.accounting import StepCounts
from vane.execution.caller import Caller
from vane.execution.inference import learn_schemas
from vane.execution.ledger import Ledger
from vane.execution.local import LocalRunner, materialized
from vane.execution.lowering import row_caps
from vane.execution.ray.cluster import cluster_state, ray_module
from vane.execution.ray.fit import check_fits, pools
from vane.execution.ray.lowering import (
    RayLowering,
    describe_actor,
    holds_udf,
    host_keys,
)
from vane.execution.ray.parked import PARKED
from vane.execution.ray.stream import closing, fetched, table_of
from vane.execution.ray.stream import count as count_rows
from vane.execution.ray.tally import StepState, action_tally
from vane.execution.ray.waits import Load, ResourceWatch, Sample, decide
from vane.execution.runner import action_events
from vane.execution.totals import stage_totals
from vane.io.commit import abort_unfinished, writes_started
from vane.io.resume import Resume, ResumeStore
from vane.io.sinks import Part, Sink, WriteResult
from vane.observe.events import (
    ServerCount,
    ServerRequests,
    StageFinished,
    StageStarted,
    StageWaiting,
    log,
)
from vane.observe.progress import wants_progress
from vane.plan.nodes import MaterializedScan, PlanNode, Source, SqlStep, UdfStep
from vane.plan.optimizer import optimize
from vane.plan.traverse import walk
from vane.udf.runtime import RowError

# Part files being written at once by Ray tasks during a write.
_WRITES_IN_FLIGHT = 4


class RayRunner:
    """Plans without a UDF step run in DuckDB on the driver, as on the local runner (Ray adds
    nothing to SQL but transfers); plans with one run their UDF steps and the row-local steps
    around them on Ray."""

    name = "ray"

    def __init__(self) -> None:
        self._local = LocalRunner()

    # ---- checks and explain ----------------------------------------------------------------

    def check(self, plan: PlanNode) -> None:
        """The plan's actors, every UDF step's at once, and a CPU for the tasks that feed them,
        against the cluster (``fit.py``): a plan the cluster cannot run fails now, saying what
        to change, rather than waiting forever."""
        check_fits(plan, cluster_state())

    def placement(self, plan: PlanNode) -> dict[int, str]:
        if not holds_udf(plan):
            return {id(node): "driver (DuckDB)" for node in walk(plan)}
        where: dict[int, str] = {}
        for node in walk(plan):
            if isinstance(node, UdfStep):
                where[id(node)] = describe_actor(node.udf)
            elif isinstance(node, SqlStep) and not node.row_local:
                where[id(node)] = "driver (DuckDB)"
            elif holds_udf(node) or _feeds_ray(node, plan):
                where[id(node)] = (
                    "ray tasks (read)"
                    if isinstance(node, Source)
                    else "ray tasks (DuckDB per block)"
                )
            else:
                where[id(node)] = "driver (DuckDB)"
        return where

    # ---- actions ----------------------------------------------------------------------------

    def to_arrow(self, plan: PlanNode) -> pa.Table:
        plan = optimize(plan)
        if not holds_udf(plan):
            return self._local.to_arrow(plan)
        with _action(plan) as lowering:
            return lowering.reader(plan, get_config().batch_size).read_all()

    def count(self, plan: PlanNode) -> int:
        plan = optimize(plan)
        if not holds_udf(plan):
            return self._local.count(plan)
        with _action(plan) as lowering:
            if lowering.runs_on_ray(plan):
                return count_rows(lowering.blocks(plan))
            rows = lowering.relation(plan).aggregate("count(*)").fetchall()
            return int(rows[0][0])

    def stream(self, plan: PlanNode, batch_size: int | None) -> Iterator[pa.RecordBatch]:
        """As the local runner's: Ray's blocks as they come, or batches of ``batch_size``."""
        return self._stream(plan, batch_size, streaming=True)

    def _stream(
        self, plan: PlanNode, batch_size: int | None, *, streaming: bool
    ) -> Iterator[pa.RecordBatch]:
        plan = optimize(plan)
        if not holds_udf(plan):
            yield from self._local.stream(plan, batch_size)
            return
        with _action(plan, streaming=streaming, handed_out=True) as lowering:
            if batch_size is None:
                yield from lowering.produced(plan, get_config().batch_size)
            else:
                yield from exact_batches(lowering.reader(plan, batch_size), batch_size)

    def materialize(self, plan: PlanNode) -> MaterializedScan:
        # every row is read: Ray may prefetch
        return materialized(plan, self._stream(plan, get_config().batch_size, streaming=False))

    def write(
        self,
        plan: PlanNode,
        sink: Sink,
        *,
        resume: Resume | None = None,
        errors_to: str | None = None,
        errors_key: tuple[str, ...] | None = None,
    ) -> WriteResult:
        """Ray tasks write the part files of a plan that ends on Ray, in block order, into the
        write's staging directory; the driver commits them all at once (or none).

        ``resume``: the UDF steps' actors answer from, and keep their answers in, the store
        the driver opens as the local runner does (``actor.py`` says why the actors write it);
        the driver removes it once the output is committed. ``errors_to``: the rows each
        batch's ``on_error`` handled reach the driver through the action's tally with the
        batch's counts, and the driver records them in the same ``Ledger`` as the local
        runner, before the output (and the ledger with it) is committed."""
        started = time.perf_counter()  # the whole write, as on the local runner
        caller = f"write_{getattr(sink, 'format', 'table')}"
        sink.check_schema(plan.schema)
        plan = optimize(plan)
        if not holds_udf(plan):
            return self._local.write(
                plan, sink, resume=resume, errors_to=errors_to, errors_key=errors_key
            )
        writes = writes_started()
        try:
            return self._write(plan, sink, caller, started, resume, errors_to, errors_key)
        finally:
            try:
                abort_unfinished(writes)  # what a Ctrl-C in the write's start left begun
            except KeyboardInterrupt:  # (a second Ctrl-C as it began: commit.abort_surely)
                abort_unfinished(writes)
                raise

    def _write(  # noqa: PLR0917 - private; write() names every argument
        self,
        plan: PlanNode,
        sink: Sink,
        caller: str,
        started: float,
        resume: Resume | None,
        errors_to: str | None,
        errors_key: tuple[str, ...] | None,
    ) -> WriteResult:
        from vane.execution.write_setup import prepare_write
        from vane.io.ledger import LedgeredWrite

        # The actors open the store from their own working directories: by its absolute path
        sink, ledger, store = prepare_write(
            plan,
            sink,
            caller,
            resume=resume,
            errors_to=errors_to,
            errors_key=errors_key,
            absolute_store=True,
        )
        from vane.io.sinks import write_to

        try:
            if store is not None:
                _warn_unless_shared(store)
            with _action(plan, resume=store, ledger=ledger) as lowering:
                if sink.single_file or not lowering.runs_on_ray(plan):
                    rows = lowering.reader(plan, get_config().batch_size)
                    if ledger is not None:  # recorded once every row is read, before the commit
                        rows = _recorded_after(rows, lowering, ledger)
                    committed = write_to(sink, rows)
                else:
                    write = sink.start()
                    try:
                        if isinstance(write, LedgeredWrite):
                            # the tasks write the output's parts; the driver, the ledger's file
                            parts = _write_parts(lowering, plan, write.writer.writer)
                            assert ledger is not None
                            _record_failed(lowering, ledger)
                            write.writer.write_ledger(parts)
                        else:
                            parts = _write_parts(lowering, plan, write.writer)
                        committed = write.commit(parts)
                    except BaseException:
                        write.abort()
                        raise
                steps = tuple(lowering.progress.finish())
        finally:
            if store is not None:
                store.close()  # the driver's logs (a failed job's answers stay kept)
        if store is not None:
            store.finish()  # the output holds every row: the saved work has served
        return committed.result(time.perf_counter() - started, steps)


def _record_failed(lowering: RayLowering, ledger: Ledger) -> None:
    """The rows the steps' actors sent the tally, recorded in the write's ledger. (In the
    order their batches were answered, which on Ray is not always the input's.)"""
    ray = ray_module()
    failed: dict[int, list[tuple[pa.Table, list[RowError]]]] = ray.get(
        lowering.tally.failed_rows.remote()
    )
    for key, batches in failed.items():
        node = lowering.steps.get(key)
        record = None if node is None else ledger.recorder(node)
        if record is None:
            continue
        for rows, errors in batches:
            record(rows, errors)


def _recorded_after(
    rows: pa.RecordBatchReader, lowering: RayLowering, ledger: Ledger
) -> pa.RecordBatchReader:
    def batches() -> Iterator[pa.RecordBatch]:
        yield from rows
        _record_failed(lowering, ledger)

    return pa.RecordBatchReader.from_batches(rows.schema, batches())


def _warn_unless_shared(store: ResumeStore) -> None:
    """The actors keep a resumable write's answers at the store's path on their own node: on
    a cluster of several nodes, a rerun finds them only if that path is shared."""
    ray = ray_module()
    alive = [node for node in ray.nodes() if node.get("Alive")]
    if len(alive) > 1:
        log.warning(
            "vane: resume=True on a Ray cluster of %d nodes: each node's actors keep their "
            "answers in %s on that node, so a rerun finds them only if that path is on storage "
            "every node shares (write to a destination on a shared filesystem, or set "
            "VANE_CACHE_DIR to one for an object-store destination); see docs/resume.md",
            len(alive),
            store.path,
        )


def _feeds_ray(node: PlanNode, plan: PlanNode) -> bool:
    """Whether a UDF step reads ``node`` through row-local steps only (so it runs on Ray)."""
    for parent in walk(plan):
        if isinstance(parent, UdfStep) and _row_local_path(parent.input, node):
            return True
    return False


def _row_local_path(top: PlanNode, target: PlanNode) -> bool:
    node = top
    while True:
        if node is target:
            return True
        if isinstance(node, SqlStep) and node.row_local:
            node = node.inputs[0]
            continue
        return False


def _write_parts(lowering: RayLowering, plan: PlanNode, writer: Any) -> list[Part]:
    """Each block of the plan's dataset written by a Ray task as its own part file(s), named
    by the block's position so the files sort in row order."""
    ray = ray_module()
    schema = plan.schema

    def write_block(block: Any, start: int, rows: int, index: int) -> list[Part]:
        rows_there = table_of(block).slice(start, rows)
        parts: list[Part] = writer.write(rows_there.to_batches(), schema, worker=f"{index:06d}")
        return parts

    remote = ray.remote(num_cpus=1, max_retries=2)(write_block)

    parts: list[Part] = []
    pending: list[Any] = []
    done = itertools.count(1)

    def collect(ref: Any) -> None:
        parts.extend(_written(ref, lowering.watch))
        lowering.watch.moved("write tasks", next(done))

    with closing(iter(lowering.blocks(plan))) as blocks:
        for index, (ref, start, rows) in enumerate(blocks):
            pending.append(remote.remote(ref, start, rows, index))
            while len(pending) > _WRITES_IN_FLIGHT:
                collect(pending.pop(0))
    for ref in pending:
        collect(ref)
    return parts


def _written(ref: Any, watch: ResourceWatch) -> list[Part]:
    """A write task's parts, waited for as long as the watch allows (cancelled when it gives
    up)."""
    parts: list[Part] = fetched(ref, watch, cancel=True)
    return parts


@contextmanager
def _action(
    plan: PlanNode,
    *,
    streaming: bool = False,
    handed_out: bool = False,
    resume: ResumeStore | None = None,
    ledger: Ledger | None = None,
) -> Iterator[RayLowering]:
    """One action on Ray: a tally of each UDF step's rows (progress events while it runs, the
    on_error warning at its end, as locally), errors from actors raised as the driver would
    raise them, cursors closed."""
    ray = ray_module()
    learn_schemas(plan)
    RayRunner().check(plan)
    # Hosts kept by earlier actions that none of this one's steps can take end now: they would
    # hold what its own hosts need (``parked.py``).
    PARKED.keep_only(host_keys(plan))
    tally = action_tally(ray)
    try:  # (its tally is let go of whatever fails, from here on)
        watch = ResourceWatch(pools(plan), get_config().resource_wait_timeout_s)
        lowering = RayLowering(
            plan, tally, watch, streaming=streaming, resume=resume, ledger=ledger
        )
        totals = stage_totals(plan, row_caps(plan))
        progress = lowering.progress = _Progress(tally, lowering.steps, Caller(), watch, totals)
        writes = writes_started(handed_out=handed_out)  # (a stream's reader may let go of it late)
        try:
            yield lowering
            progress.finish()
        except GeneratorExit:
            progress.finish()  # a stream closed early: the steps' summaries as far as they went
            raise
        except BaseException as exc:
            _stop_executions(watch)
            if watch.failure is not None and not _interrupt(exc):
                raise watch.failure from None  # what stopped Ray Data's execution, said plainly
            # What a stream from Ray raised, rather than DuckDB's text for it
            failed = lowering.failure if lowering.failure and not _interrupt(exc) else exc
            error = _unwrap(failed)
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
                progress.stop()
                progress.events.close()
                lowering.close()
                watch.close()
    finally:
        tally.close()


def _stop_executions(watch: ResourceWatch) -> None:
    """A failed action's actors, killed now (a UDF step's own stream kills its actors when it
    fails, but one that has not failed itself may still be held by the failure's traceback),
    so that the next action (a rerun with a larger budget) does not wait for them."""
    ray = ray_module()
    for actor in watch.started_actors():  # (not those kept by a step that ended well)
        with contextlib.suppress(Exception):  # best effort: the failure is what is raised
            ray.kill(actor)


# How long a request of an action's finds no room before the hosts kept by earlier actions end.
KEPT_GIVE_WAY_S = 1.0


class _Progress:
    """The local runner's stage events for the UDF steps of a Ray action, from the tally:
    ``StageStarted`` now, ``BatchDone`` as the counts move (polled twice a second),
    ``StageWaiting`` while the action waits for resources (``waits.py``), ``StageFinished``
    and the on_error warning at the end."""

    POLL_SECONDS = 0.5

    def __init__(
        self,
        tally: Any,
        steps: dict[int, UdfStep],
        caller: Caller,
        watch: ResourceWatch,
        totals: dict[int, int],
    ) -> None:
        """``totals``: the rows each step will read, where that is certain (by node identity,
        ``totals.py``)."""
        self.tally = tally
        self.steps = steps
        self.caller = caller  # where the on_error warnings are shown
        self.watch = watch
        self.events = action_events()
        self._seen: dict[int, StepCounts] = {key: StepCounts() for key in steps}
        self._servers_seen: dict[int, tuple[ServerCount, ...]] = {}
        self._waiting: str | None = None  # the state the progress line shows
        self._no_room_since: float | None = None  # since when a request of ours finds no room
        self.finished: list[StageFinished] = []
        self._done = False
        self._stopped = threading.Event()
        for key, node in steps.items():
            total = totals.get(id(node))
            self.events.emit(StageStarted(node.udf.name, key, node.udf.min_actors, total))
        self._thread: threading.Thread | None = None
        if steps:  # polled even with nobody listening: the resource watch needs the counts
            self._thread = threading.Thread(
                target=self._poll, name="vane-ray-progress", daemon=True
            )
            self._thread.start()

    def _poll(self) -> None:
        from vane.execution.ray.watching import cluster_load

        while not self._stopped.wait(self.POLL_SECONDS):
            try:
                totals = ray_module().get(self.tally.totals.remote())
            except Exception:  # the cluster is going away: nothing to show
                return
            self._update(totals)
            try:
                load = cluster_load()
            except Exception:  # the cluster did not answer this time: ask it at the next poll
                continue
            self._watch(totals, load)

    def _watch(self, totals: dict[int, StepState], load: Load) -> None:
        """The resource watch's sample of this poll; the steps' lines say its state."""
        counts = {key: totals.get(key) or StepState() for key in self.steps}
        total, free, pending = load
        sample = Sample(
            moved=(
                tuple(
                    (c.counts.rows_in, c.counts.rows_out, c.actors, c.starting)
                    for c in counts.values()
                ),
                self.watch.ray_progress(),
            ),
            working=any(c.busy > 0 or c.starting > 0 for c in counts.values()),
            pulling=self.watch.is_pulling,
            actors={key: max(c.actors, 0) + max(c.starting, 0) for key, c in counts.items()},
            total=total,
            free=free,
            pending=pending,
        )
        now = time.monotonic()
        if decide(self.watch.pools, sample) is None:
            self._no_room_since = None
        elif self._no_room_since is None:
            self._no_room_since = now
        elif now - self._no_room_since >= KEPT_GIVE_WAY_S:
            # A request of the action's has found no room for a while (not a step just
            # starting, whose hosts have yet to say so): hosts kept by earlier actions
            # (``parked.py``), beyond those its steps took, give back what they hold.
            PARKED.clear()
        wait = self.watch.observe(sample, now)
        state = wait.line() if wait is not None else None
        if state == self._waiting:
            return
        if state is not None and self._waiting is None and not self._displayed:
            log.warning("vane: %s", state)  # no progress line to say it on
        self._waiting = state
        for key, node in self.steps.items():
            self.events.emit(StageWaiting(node.udf.name, key, state))

    @property
    def _displayed(self) -> bool:
        return wants_progress(get_config().progress)

    def _update(self, totals: dict[int, StepState]) -> None:
        """``BatchDone`` for what moved since the last poll, ``ServerRequests`` for requests
        whose counts changed (only the polling thread calls this until ``finish`` has stopped
        it)."""
        for key, state in totals.items():
            if key in self.steps and state.servers != self._servers_seen.get(key, ()):
                self._servers_seen[key] = state.servers
                name = self.steps[key].udf.name
                self.events.emit(ServerRequests(name, key, state.servers))
            seen, counts = self._seen.get(key), state.counts
            if seen is None or (counts.rows_in, counts.rows_out) == (seen.rows_in, seen.rows_out):
                continue
            self._seen[key] = counts
            moved = counts.since(seen)
            name = self.steps[key].udf.name
            busy, actors = max(state.busy, 0), max(state.actors, 0)
            self.events.emit(moved.progress(name, key, busy=busy, actors=actors))

    def finish(self) -> list[StageFinished]:
        """The steps' summaries, emitted once (later calls return the same)."""
        if self._done:
            return self.finished
        self._done = True
        self.stop()
        totals: dict[int, StepState] = ray_module().get(self.tally.totals.remote())
        self._update(totals)
        # Inputs before the steps that read them (``steps`` holds parents first), as a local
        # action's stages end: so the warnings come in that order, and ``WriteResult.steps``
        # names two steps of one function ("embed", "embed #2") as the local runner does.
        for key, node in reversed(self.steps.items()):
            spec, state = node.udf, totals.get(key) or StepState()
            summary = state.counts.finished(spec.name, key)
            self.finished.append(summary)
            self.events.emit(summary)
            message = state.counts.warning(spec, spec.name)
            if message:
                self.caller.warn(message)
        return self.finished

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _interrupt(exc: BaseException) -> bool:
    return not isinstance(exc, Exception)  # KeyboardInterrupt, SystemExit: as they are


def _unwrap(exc: BaseException) -> BaseException:
    """The error to raise for what Ray raised: an actor's failure as vane's error (a
    ``UDFError`` catchable as the user's class), a dead actor as ``ActorDiedError``."""
    from ray.exceptions import ActorDiedError as RayActorDied
    from ray.exceptions import RayActorError

    from vane.execution.ray.actor import RemoteFailure

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RemoteFailure):
            # Ray's RayTaskError(RemoteFailure) holds the actor's exception as its cause
            original = getattr(current, "cause", current)
            return (original if isinstance(original, RemoteFailure) else current).error()
        if isinstance(current, VaneError) and current is not exc:
            return current
        if isinstance(current, (RayActorError, RayActorDied)):
            error = ActorDiedError(
                f"a Ray actor running a UDF step died and Ray gave up restarting it: "
                f"{str(current).splitlines()[0] if str(current) else type(current).__name__}. "
                "A row that kills its worker (a segfault, os._exit, out of memory) fails the "
                "job on the Ray runner; run the step on the local runner to isolate such rows"
            )
            error.__cause__ = current
            return error
        nested = getattr(current, "cause", None)
        current = nested if isinstance(nested, BaseException) else current.__cause__
    return exc
