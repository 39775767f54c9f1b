"""The Ray runner: the same plan, lowered onto Ray Data (``lowering.py``), with UDF steps on
Ray actors that host vane's actor body (``actor.py``). Writes stage part files from Ray tasks
and commit them from the driver with the same all-or-nothing protocol as the local runner.
See docs/ray.md."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pyarrow as pa

from vane._arrow import exact_batches
from vane.config import get_config
from vane.errors import ActorDiedError, ConfigurationError, VaneError
from vane.execution.caller import Caller
from vane.execution.local import LocalRunner, materialized
from vane.execution.ray.actor import StepCounts
from vane.execution.ray.cluster import cluster_resources, ray_module
from vane.execution.ray.lowering import (
    RayLowering,
    actor_resources,
    describe_actor,
    holds_udf,
)
from vane.execution.resources import gpus_needed
from vane.execution.stage import on_error_warning
from vane.io.sinks import FileSink, Part, WriteResult
from vane.observe.events import BatchDone, StageFinished, StageStarted, action_events
from vane.plan.nodes import MaterializedScan, PlanNode, Source, SqlStep, UdfStep
from vane.plan.optimizer import optimize
from vane.plan.traverse import walk

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
        """Each UDF step's actors against the cluster's CPUs, GPUs and memory: a request the
        cluster cannot meet fails now, with both numbers, rather than waiting forever."""
        resources = cluster_resources()
        for node in walk(plan):
            if not isinstance(node, UdfStep):
                continue
            spec = node.udf
            each = actor_resources(spec)
            actors = spec.min_actors
            wants = (
                ("GPU", gpus_needed(actors, spec.gpus), "gpus"),
                ("CPU", actors * each["num_cpus"], "cpus"),
                ("memory", actors * each.get("memory", 0), "memory"),
            )
            for resource, needed, option in wants:
                has = resources.get(resource, 0)
                if needed > has:
                    shown = (
                        f"{needed / 2**30:.1f} GiB vs {has / 2**30:.1f} GiB"
                        if resource == "memory"
                        else f"{needed:g} vs {has:g}"
                    )
                    raise ConfigurationError(
                        f"{spec.verb} step `{spec.name}` needs {resource} for {actors} actor(s) "
                        f"and the Ray cluster has too few ({shown}). Lower concurrency or "
                        f"{option}, or add nodes with {resource} to the cluster"
                    )

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
                return int(lowering.dataset(plan).count())
            rows = lowering.relation(plan).aggregate("count(*)").fetchall()
            return int(rows[0][0])

    def stream(self, plan: PlanNode, batch_size: int) -> Iterator[pa.RecordBatch]:
        plan = optimize(plan)
        if not holds_udf(plan):
            yield from self._local.stream(plan, batch_size)
            return
        with _action(plan) as lowering:
            yield from exact_batches(lowering.reader(plan, batch_size), batch_size)

    def materialize(self, plan: PlanNode) -> MaterializedScan:
        return materialized(plan, self.stream(plan, get_config().batch_size))

    def write(self, plan: PlanNode, sink: FileSink) -> WriteResult:
        """Ray tasks write the part files of a plan that ends on Ray, in block order, into the
        write's staging directory; the driver commits them all at once (or none)."""
        sink.check_schema(plan.schema)
        plan = optimize(plan)
        if not holds_udf(plan):
            return self._local.write(plan, sink)
        from vane.io.sinks import write_to

        with _action(plan) as lowering:
            if sink.single_file or not lowering.runs_on_ray(plan):
                result = write_to(sink, lowering.reader(plan, get_config().batch_size))
            else:
                write = sink.start()
                try:
                    parts = _write_parts(lowering.dataset(plan), write.writer, plan.schema)
                    result = write.commit(parts)
                except BaseException:
                    write.abort()
                    raise
            return replace(result, steps=tuple(lowering.progress.finish()))


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


def _write_parts(dataset: Any, writer: Any, schema: pa.Schema) -> list[Part]:
    """Each block of ``dataset`` written by a Ray task as its own part file(s), named by the
    block's position so the files sort in row order."""
    ray = ray_module()

    def write_block(block: pa.Table, index: int) -> list[Part]:
        parts: list[Part] = writer.write(block.to_batches(), schema, worker=f"{index:06d}")
        return parts

    remote = ray.remote(num_cpus=1, max_retries=2)(write_block)

    parts: list[Part] = []
    pending: list[Any] = []
    blocks = (ref for bundle in dataset.iter_internal_ref_bundles() for ref in bundle.block_refs)
    for index, ref in enumerate(blocks):
        pending.append(remote.remote(ref, index))
        while len(pending) > _WRITES_IN_FLIGHT:
            parts.extend(ray.get(pending.pop(0)))
    for ref in pending:
        parts.extend(ray.get(ref))
    return parts


@contextmanager
def _action(plan: PlanNode) -> Iterator[RayLowering]:
    """One action on Ray: a tally of each UDF step's rows (progress events while it runs, the
    on_error warning at its end, as locally), errors from actors raised as the driver would
    raise them, cursors closed."""
    ray = ray_module()
    RayRunner().check(plan)
    # On the driver's node: if a worker node is lost, the counts must not be lost with it.
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from vane.execution.ray.actor import Tally

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    tally = ray.remote(num_cpus=0, scheduling_strategy=here)(Tally).remote()
    lowering = RayLowering(plan, tally)
    progress = lowering.progress = _Progress(tally, lowering.steps, Caller())
    try:
        yield lowering
        progress.finish()
    except GeneratorExit:
        progress.finish()  # a stream closed early: the steps' summaries as far as they went
        raise
    except BaseException as exc:
        # What a stream from Ray raised, rather than DuckDB's text for it
        failed = lowering.failure if lowering.failure and not _interrupt(exc) else exc
        error = _unwrap(failed)
        if error is exc:
            raise
        raise error from error.__cause__
    finally:
        progress.stop()
        progress.events.close()
        lowering.close()
        ray.kill(tally)


class _Progress:
    """The local runner's stage events for the UDF steps of a Ray action, from the tally:
    ``StageStarted`` now, ``BatchDone`` as the counts move (polled twice a second while
    anybody listens), ``StageFinished`` and the on_error warning at the end."""

    POLL_SECONDS = 0.5

    def __init__(self, tally: Any, steps: dict[int, UdfStep], caller: Caller) -> None:
        self.tally = tally
        self.steps = steps
        self.caller = caller  # where the on_error warnings are shown
        self.events = action_events()
        self.started = time.perf_counter()
        self._seen: dict[int, StepCounts] = {key: StepCounts() for key in steps}
        self.finished: list[StageFinished] = []
        self._done = False
        self._stopped = threading.Event()
        for key, node in steps.items():
            self.events.emit(StageStarted(node.udf.name, key, node.udf.min_actors))
        self._thread: threading.Thread | None = None
        if self.events.listening and steps:
            self._thread = threading.Thread(
                target=self._poll, name="vane-ray-progress", daemon=True
            )
            self._thread.start()

    def _poll(self) -> None:
        while not self._stopped.wait(self.POLL_SECONDS):
            try:
                self._update(ray_module().get(self.tally.totals.remote()))
            except Exception:  # the action is ending (the tally was killed): nothing to show
                return

    def _update(self, totals: dict[int, StepCounts]) -> None:
        """``BatchDone`` for what moved since the last poll (only the polling thread calls
        this until ``finish`` has stopped it)."""
        for key, counts in totals.items():
            seen = self._seen.get(key)
            if seen is None or (counts.rows_in, counts.rows_out) == (seen.rows_in, seen.rows_out):
                continue
            self._seen[key] = counts
            usage = {k: v - seen.usage.get(k, 0) for k, v in counts.usage.items()}
            self.events.emit(
                BatchDone(
                    self.steps[key].udf.name,
                    key,
                    counts.rows_in - seen.rows_in,
                    counts.rows_out - seen.rows_out,
                    max(counts.busy, 0),
                    max(counts.actors, 0),
                    {k: v for k, v in usage.items() if v},
                )
            )

    def finish(self) -> list[StageFinished]:
        """The steps' summaries, emitted once (later calls return the same)."""
        if self._done:
            return self.finished
        self._done = True
        self.stop()
        totals: dict[int, StepCounts] = ray_module().get(self.tally.totals.remote())
        self._update(totals)
        seconds = time.perf_counter() - self.started
        for key, node in self.steps.items():
            spec, counts = node.udf, totals.get(key) or StepCounts()
            summary = StageFinished(
                spec.name,
                key,
                counts.rows_in,
                counts.rows_out,
                counts.skipped,
                counts.nulled,
                seconds,
                counts.usage,
            )
            self.finished.append(summary)
            self.events.emit(summary)
            message = on_error_warning(
                spec,
                spec.name,
                skipped=counts.skipped,
                nulled=counts.nulled,
                first_error=counts.first_error,
                poisoned=counts.poisoned,
            )
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
