"""A UDF step's output schema, learned from its first output batch when the user gave none.

Ray Data infers what ``map_batches`` returns; porting its code should not mean writing every
schema first. Without ``schema=``, the first time the plan needs the step's schema (the next
verb, ``schema``, an action), the first ``batch_size`` rows of its input are read and run
through one actor of the step, and the columns it returns, in the types they come in, are the
schema; every batch of the real run is then checked against it as a declared one is. The probe
costs one more construction of the UDF (a model load): pass ``schema=`` to skip it.

The probe runs on this machine: on the thread backend in this process, on any other in a worker
process (never constructing the UDF in this process when it is meant to run elsewhere). On the
Ray runner its input is read through Ray, and the probe asks for no GPU.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace

import pyarrow as pa

from vane.errors import SchemaError
from vane.plan.nodes import ArrowStreamScan, Limit, PlanNode, UdfStep
from vane.plan.traverse import walk
from vane.udf.runtime import Task
from vane.udf.spec import UdfSpec

__all__ = ["infer_output_schema", "learn_schemas"]

_NOTE = "(this ran the step's first batch to learn its output schema; pass schema= to skip it)"


def _probe_spec(spec: UdfSpec) -> UdfSpec:
    """One actor of the step, raising what it raises; a Ray actor's probe is a worker process
    here, asking for no GPU (this machine may have none)."""
    if spec.backend == "ray_actor":
        spec = replace(spec, backend="subprocess_actor", gpus=0)
    return replace(spec, on_error="raise", min_actors=1, max_actors=1)


def learn_schemas(plan: PlanNode) -> None:
    """Learn every UDF step's schema that is not yet known, before an action opens anything: a
    probe run midway through would find a ``RecordBatchReader`` the action has already taken."""
    for node in walk(plan):
        if isinstance(node, UdfStep):
            _ = node.schema


def infer_output_schema(plan: PlanNode, spec: UdfSpec) -> pa.Schema:
    """The schema of what ``spec`` returns for the first rows of ``plan``."""
    from vane.execution.actors import make_pool
    from vane.execution.runner import current_runner

    rows = spec.rows_per_batch
    with ExitStack() as peeking:  # a stream's first rows, read here, are read again by the action
        for node in walk(plan):
            if isinstance(node, ArrowStreamScan):
                peeking.enter_context(node.peeked())
        sample = current_runner().to_arrow(Limit(plan, rows, 0))
    where = f"{spec.verb} step `{spec.name}`"
    if sample.num_rows == 0:
        raise SchemaError(
            f"{where} has no schema= and its input has no rows to learn one from; pass schema="
        )
    if spec.reads is not None:
        sample = sample.select(list(spec.reads))
    pool = make_pool(_probe_spec(spec), None, spec.name)
    failed = True
    try:
        pool.start()
        outcome = pool.submit(Task(0, 0, sample, call_rows=rows)).result()
        failed = False
    except Exception as exc:
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(_NOTE)
        raise
    finally:
        pool.teardown(graceful=not failed)
    return _learned(outcome.table.schema, where)


def _learned(schema: pa.Schema, where: str) -> pa.Schema:
    if not schema.names:
        raise SchemaError(f"{where} returned no columns for its first batch; pass schema=")
    unknown = [f.name for f in schema if pa.types.is_null(f.type)]
    if unknown:
        raise SchemaError(
            f"{where} returned only nulls in column(s) {unknown} for its first batch, so their "
            "type cannot be learned from it; pass schema= to declare the columns"
        )
    return schema
