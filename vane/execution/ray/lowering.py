"""Lowering a plan onto Ray Data.

- A source becomes a Ray dataset: files are read by parallel Ray tasks (``blocks.py``), a
  range by ``ray.data.range``, an Arrow table by ``ray.data.from_arrow``, a Lance table by
  ``ray.data.read_lance`` (other table formats are read on the driver).
- A chain of row-local SQL steps becomes one ``map_batches`` task per block, running the
  steps with the worker's DuckDB.
- A UDF step runs on Ray actors of vane's own that host vane's actor body (``hosts.py``), with
  the step's concurrency, GPUs, CPUs and memory, fed the blocks of what it reads. Its answers,
  and what runs on Ray above it, are a stream of blocks in the object store (``stream.py``):
  a chain of row-local SQL steps over them is a Ray task per block.
- A step that needs all rows (join, aggregate, sort, limit, union, distinct, SQL) runs in
  DuckDB on the driver, over its inputs streamed back from Ray; what reads its result on Ray
  gets it through the object store.

Ray Data keeps blocks in order (``preserve_order``), and so do the streams above UDF steps, so
rows come back in the order the local runner gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import pyarrow as pa

from vane._arrow import one_batch
from vane._background import in_background
from vane.backend import connection
from vane.backend.connection import Cursor, Relation
from vane.execution.ledger import Ledger
from vane.execution.lowering import row_caps
from vane.execution.model_bars import worker_environment
from vane.execution.ray.blocks import FIRST_ROWS, file_datasource, largest_block
from vane.execution.ray.cluster import ray_module
from vane.execution.ray.fit import TASK_CPUS, actor_resources
from vane.execution.ray.hosts import StepHosts
from vane.execution.ray.parked import HostKey
from vane.execution.ray.stream import Block, Blocks, mapped, of_dataset
from vane.execution.ray.stream import tables as stream_tables
from vane.execution.ray.waits import ResourceWatch
from vane.execution.resume import Checkpoint, step_key
from vane.execution.row_steps import BlockSql, reroot, streamed
from vane.io import file_stores
from vane.io.resume import ResumeStore
from vane.plan.nodes import (
    ArrowScan,
    ArrowStreamScan,
    FileScan,
    Limit,
    PlanNode,
    RangeScan,
    Source,
    SqlStep,
    TableScan,
    UdfStep,
)
from vane.plan.rows import answers_row_for_row
from vane.plan.traverse import shared_subplans, walk
from vane.udf.spec import UdfSpec, output_schema

T = TypeVar("T")

# Rows per object a driver-side result is cut into when Ray steps read it.
_OBJECT_ROWS = 65_536
# How often a wait on Ray outside Ray Data's executions looks whether the watch gave up.
_WATCH_SECONDS = 0.5
# Blocks an in-memory table is split into, so that later steps can run in parallel.
_MIN_BLOCKS = 8


# Calls a plain UDF's Ray actor takes at once. Its worker process still runs the function on one
# batch at a time, but the next batch is already queued there while the current one runs, so a
# batch's trip into the worker and back (and its tally) no longer leaves the worker idle: a
# function that sleeps 20 ms a batch cost 3.3 ms more per batch on Ray with one call at a time,
# 0.4 ms with two (Ray Data's own actors: 0.25 ms; bench/ray_per_batch.py). Each actor then
# holds one batch more; a third call bought nothing.
PLAIN_CALLS_PER_ACTOR = 2


def _placement(spec: UdfSpec) -> dict[str, Any]:
    """Where the step's actors may run: on the driver's node for a step that keeps state on
    the driver's disk (``UdfSpec.driver_node``: a Batch API journal), else anywhere."""
    if spec.driver_node is None:
        return {}
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(here, soft=False)}


def host_shape(spec: UdfSpec) -> tuple[dict[str, Any], int]:
    """The Ray actor options of the step's hosts (``hosts.py``), and the calls each takes at
    once."""
    # No runtime environment of its own: an actor with one cannot use the worker processes
    # Ray keeps started (0.7 s more per action); the model libraries' switch travels with the
    # arguments instead.
    options = {**actor_resources(spec), **_placement(spec)}
    calls = spec.max_concurrency_per_actor if spec.is_async else PLAIN_CALLS_PER_ACTOR
    return options, calls


def host_keys(plan: PlanNode) -> Counter[HostKey]:
    """What the hosts of ``plan``'s UDF steps would be started as, and how many the steps
    start with: the kept hosts an action of it takes (``parked.py``)."""
    ray = ray_module()
    keys: Counter[HostKey] = Counter()
    for node in walk(plan):
        if isinstance(node, UdfStep):
            options, calls = host_shape(node.udf)
            keys[HostKey.of(ray, options, calls, worker_environment())] += node.udf.min_actors
    return keys


def holds_udf(node: PlanNode) -> bool:
    return any(isinstance(n, UdfStep) for n in walk(node))


def describe_actor(spec: UdfSpec) -> str:
    resources = actor_resources(spec)
    parts = [f"{resources['num_cpus']:g} CPU"]
    if spec.gpus:
        parts.append(f"{spec.gpus:g} GPU")
    if spec.memory:
        parts.append(f"{spec.memory / 2**30:.1f} GiB")
    size = (
        str(spec.min_actors)
        if spec.min_actors == spec.max_actors
        else f"{spec.min_actors}-{spec.max_actors}"
    )
    where = " on the driver's node" if spec.driver_node is not None else ""
    return f"ray: {size} actor(s) x {' + '.join(parts)}{where}"


class RayLowering:
    """One action's lowering: Ray datasets for the parts of ``plan`` that run on Ray, DuckDB on
    the driver for the rest. Shared subplans with UDF steps are materialized once. A
    ``streaming`` action's reader waits for each batch (see ``_tables``)."""

    def __init__(
        self,
        plan: PlanNode,
        tally: Any,
        watch: ResourceWatch,
        *,
        streaming: bool = False,
        resume: ResumeStore | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        """``resume``: a resumable write's store, each UDF step's actors answering from it and
        keeping their answers in it (``actor.py``); ``ledger``: a write's error ledger, whose
        steps' actors send the rows ``on_error`` handled to the tally."""
        import ray.data

        self.ray_data = ray.data
        self.tally = tally
        # Ray Data's executions report their progress to it, and stop when it says so
        self.watch = watch
        self.streaming = streaming
        self.resume = resume
        self.ledger = ledger
        self._shared = shared_subplans(plan)
        # The UDF steps, by the key their actors report their counts under: the step's id.
        self.steps: dict[int, UdfStep] = {
            n.step_id: n for n in walk(plan) if isinstance(n, UdfStep)
        }
        self.progress: Any = None  # the action's events (set by the runner)
        # The rows a `limit` needs from a UDF step (by node identity): its dataset stops there.
        self._caps = row_caps(plan)
        self._first_rows = _first_batches(plan)
        # The first error a stream from Ray raised: DuckDB, reading the stream, reports it as
        # its own text, so the original (with its cause) is kept here to re-raise.
        self.failure: BaseException | None = None
        self._datasets: dict[int, Any] = {}
        self._cursors: list[Cursor] = []

    # ---- on Ray --------------------------------------------------------------------------

    def dataset(self, node: PlanNode) -> Any:
        key = id(node)
        if key in self._datasets:
            return self._datasets[key]
        from vane.execution.ray.watching import watched

        built = self._build(node)
        if isinstance(built, Blocks):
            if key in self._shared:  # read by two steps: computed once, kept in the store
                built = built.materialized()
            self._datasets[key] = built
            return built
        ds = watched(built, self.watch)
        if key in self._shared:
            with self.watch.pulling():  # read by two steps: computed once, kept in the store
                ds = watched(ds.materialize(), self.watch)
        self._datasets[key] = ds
        return ds

    def blocks(self, node: PlanNode) -> Blocks:
        """``node``'s rows on Ray as blocks in the object store, in order (``stream.py``)."""
        built = self.dataset(node)
        return built if isinstance(built, Blocks) else of_dataset(built, self.pulled)

    def pulled(self, items: Iterable[T]) -> Iterator[T]:
        """``items`` from Ray, the driver known to wait on Ray while it waits for each."""
        iterator = iter(items)
        while True:
            with self.watch.pulling():
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    def _build(self, node: PlanNode) -> Any:
        if isinstance(node, UdfStep):
            return self._udf(node)
        if isinstance(node, SqlStep) and node.row_local:
            chain: list[PlanNode] = []
            below: PlanNode = node
            while (
                isinstance(below, SqlStep)
                and below.row_local
                and (below is node or id(below) not in self._shared)
            ):
                chain.append(below)
                below = below.inputs[0]
            top, bottom = reroot(list(reversed(chain)), below.schema)
            under = self.dataset(below)
            if isinstance(under, Blocks):  # above a UDF step: a task of vane's per block
                return mapped(under, _run_block_sql, (top, bottom), self.watch, TASK_CPUS)
            return under.map_batches(
                _run_block_sql,
                fn_args=(top, bottom),
                batch_size=None,
                batch_format="pyarrow",
                zero_copy_batch=True,
            )
        if isinstance(node, RangeScan):
            return self.ray_data.range(node.n)
        if isinstance(node, FileScan):
            first_rows = self._first_rows.get(id(node), FIRST_ROWS)
            read = self.ray_data.read_datasource(file_datasource(node, first_rows))
            # (through a map that does nothing, so that the cut is made in the read's tasks:
            # Ray Data fuses a map with the repartition after it, and the read with that)
            cut = read.map_batches(_as_is, batch_size=None, batch_format="pyarrow")
            return cut.repartition(target_num_rows_per_block=largest_block(first_rows))
        if isinstance(node, ArrowScan):
            tables = _split(node.table)
            return self._built(lambda: self.ray_data.from_arrow(tables))
        if isinstance(node, TableScan) and hasattr(node.table, "ray_dataset"):
            return node.table.ray_dataset(self.ray_data)  # a table format Ray reads itself
        return self._from_driver(node)

    def _udf(self, node: UdfStep) -> Blocks:
        """The step's answers from its hosts (``hosts.py``), started when the blocks are read
        and ended when they have all been read (or the reader lets go)."""
        spec = node.udf
        udf_schema = output_schema(spec, node.declared_schema)
        source = self.dataset(node.input)
        cap = self._caps.get(id(node))
        if cap is not None and answers_row_for_row(spec):
            # Each input row gives one output row: the step reads only the rows it must answer
            # (as Ray Data pushes a limit below a `map`), and no row past them runs or raises.
            source = source.limited(cap) if isinstance(source, Blocks) else source.limit(cap)
        inputs = source if isinstance(source, Blocks) else of_dataset(source, self.pulled)
        arguments = (
            (spec, udf_schema, node.schema, spec.name),
            {
                "tally": self.tally,
                "key": node.step_id,
                "file_stores": file_stores.snapshot(),
                "checkpoint": (
                    None if self.resume is None else Checkpoint(self.resume, step_key(node))
                ),
                "failed_rows": (self.ledger is not None and self.ledger.recorder(node) is not None),
            },
        )
        options, calls_per_host = host_shape(spec)

        def answers() -> Iterator[Block]:
            hosts = StepHosts(
                ray=ray_module(),
                arguments=(*arguments, worker_environment()),
                options=options,
                rows_per_batch=spec.rows_per_batch,
                calls_per_host=calls_per_host,
                min_hosts=spec.min_actors,
                max_hosts=spec.max_actors,
                watch=self.watch,
                key=node.step_id,
                spare_cpus=TASK_CPUS,
            )
            return hosts.answers(inputs)

        answered = Blocks(answers)
        return answered if cap is None else answered.limited(cap)

    def _from_driver(self, node: PlanNode) -> Any:
        """A step computed on the driver, put into the object store for Ray steps to read."""
        import ray

        refs = []
        reader = self.reader(node, _OBJECT_ROWS)
        for batch in reader:
            if batch.num_rows:
                refs.append(ray.put(pa.Table.from_batches([batch])))
        if not refs:
            refs.append(ray.put(node.schema.empty_table()))
        return self._built(lambda: self.ray_data.from_arrow_refs(refs))

    def _built(self, make: Callable[[], T]) -> T:
        """A dataset of in-memory tables: Ray Data reads their metadata in a task (a CPU) and
        waits for it before any execution starts, where no callback can stop the wait. So
        it is built on a thread of its own and waited for here, as long as the resource
        watch allows; a build given up on ends when its task runs, its dataset unused."""
        built = in_background(make, "vane-ray-build")
        with self.watch.pulling():
            while True:
                try:
                    return built.result(timeout=_WATCH_SECONDS)
                except FutureTimeout:
                    if self.watch.failure is not None:
                        raise self.watch.failure from None

    # ---- on the driver ---------------------------------------------------------------------

    def reader(self, node: PlanNode, batch_size: int) -> pa.RecordBatchReader:
        """``node``'s rows streamed to the driver: from Ray if it runs there, else from DuckDB."""
        if self.runs_on_ray(node):
            tables = self._tables(node, batch_size)
            batches = (batch for table in tables for batch in table.to_batches())
            return pa.RecordBatchReader.from_batches(node.schema, batches)
        return self.relation(node).to_arrow_reader(batch_size)

    def produced(self, node: PlanNode, batch_size: int) -> Iterator[pa.RecordBatch]:
        """``node``'s rows as they are produced (a stream with no batch size asked): from Ray,
        each block as one batch as it comes (Ray Data's ``iter_batches(batch_size=None)``),
        limits over it counted here rather than by DuckDB, which would read far ahead; from
        DuckDB, its batches of up to ``batch_size`` rows."""
        limits: list[PlanNode] = []
        below = node
        while isinstance(below, Limit) and id(below) not in self._shared:
            limits.append(below)
            below = below.input
        if not self.runs_on_ray(below):
            yield from (b for b in self.reader(node, batch_size) if b.num_rows)
            return
        for table in streamed(limits[::-1], below.schema, self._tables(below, None)):
            batches = [batch for batch in table.to_batches() if batch.num_rows]
            if batches:
                yield one_batch(batches)

    def _tables(self, node: PlanNode, batch_size: int | None) -> Iterator[pa.Table]:
        """``node``'s rows from Ray, in tables of ``batch_size`` rows, or Ray's blocks as they
        are (``None``), in ``node``'s schema. A stream does not prefetch: Ray Data's prefetch
        waits for the next block before it hands on the one in hand, so a slow model's first
        rows would wait for its second block."""
        built = self.dataset(node)
        if isinstance(built, Blocks):
            tables = stream_tables(built, self.watch, batch_size)
            return self._guard(_conformed(tables, node.schema))
        tables = built.iter_batches(
            batch_size=batch_size,
            batch_format="pyarrow",
            prefetch_batches=0 if self.streaming else 1,
        )
        return self._guard(_conformed(tables, node.schema))

    def _guard(self, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
        try:
            yield from self.pulled(tables)
        except Exception as exc:  # not GeneratorExit: a reader closing the stream is no failure
            if self.failure is None:
                self.failure = exc
            raise

    def runs_on_ray(self, node: PlanNode) -> bool:
        """Whether ``node``'s result comes from Ray: it is row-local (or a source) over a part
        of the plan that holds a UDF step."""
        if isinstance(node, UdfStep):
            return True
        if isinstance(node, SqlStep) and node.row_local:
            return holds_udf(node)
        return False

    def relation(self, node: PlanNode) -> Relation:
        from vane.backend.lowering import lower

        cursor = connection.cursor()
        self._cursors.append(cursor)
        return lower(node, cursor, self)

    # the UdfStreams protocol of ``vane.execution.lowering.lower``: below a driver-side step,
    # a part of the plan that holds a UDF step is read from Ray
    def udf_reader(self, node: UdfStep) -> pa.RecordBatchReader:
        return self.reader(node, _OBJECT_ROWS)

    def spooled(self, node: PlanNode) -> Source | None:
        if isinstance(node, Source) or not self.runs_on_ray(node) or isinstance(node, UdfStep):
            return None
        # a row-local step over a UDF step: computed on Ray, read here as a stream
        return ArrowStreamScan(self.reader(node, _OBJECT_ROWS))

    def close(self) -> None:
        for cursor in self._cursors:
            cursor.close()
        self._cursors.clear()


def _first_batches(plan: PlanNode) -> dict[int, int]:
    """The rows of a batch of the UDF step that reads each file source (by node identity),
    directly or through row-local SQL steps (the smallest, if several do): the source's first
    block holds that many, so that the step's first answers come after one batch (see
    ``blocks.py``)."""
    batches: dict[int, int] = {}
    for node in walk(plan):
        if not isinstance(node, UdfStep):
            continue
        below = node.input
        while isinstance(below, SqlStep) and below.row_local:
            below = below.inputs[0]
        if isinstance(below, FileScan):
            rows = node.udf.rows_per_batch
            batches[id(below)] = min(rows, batches.get(id(below), rows))
    return batches


def _as_is(block: pa.Table) -> pa.Table:
    return block


def _run_block_sql(block: pa.Table, top: PlanNode, bottom: Any) -> pa.Table:
    return BlockSql(top, bottom)(block)


def _split(table: pa.Table) -> list[pa.Table]:
    if table.num_rows < _MIN_BLOCKS * 1024:
        return [table]
    size = -(-table.num_rows // _MIN_BLOCKS)
    return [table.slice(start, size) for start in range(0, table.num_rows, size)]


def _conformed(tables: Iterator[pa.Table], schema: pa.Schema) -> Iterator[pa.Table]:
    for table in tables:
        yield table if table.schema == schema else table.select(schema.names).cast(schema)
