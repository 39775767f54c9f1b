"""A UDF step's actor on Ray: a thin host for the same actor body that thread and subprocess
actors run (``vane.execution.actors.body``), so construction, retries, ``on_error``,
timeouts and the output contract are the same code on every runner.

Ray Data calls the actor with one batch at a time (an async UDF: up to
``max_concurrency_per_actor`` at once, from Ray's threads); each call hands the batch to the
body and waits for its outcome. Rows that ``on_error`` handled are counted by the action's
``Tally`` actor, so the driver can warn as the local runner does.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa

from vane.errors import ActorDiedError, ConfigurationError, UDFError
from vane.execution.actors.base import MAX_DEATHS_PER_BATCH, StartTimeout, wait_ready
from vane.execution.actors.body import ActorBody, Hang
from vane.execution.actors.ipc import error_from_bytes, error_to_bytes
from vane.udf.failures import catchable
from vane.udf.runtime import BatchOutcome, Task, failed_rows
from vane.udf.spec import UdfSpec


class RayUdf:
    """Constructed by Ray Data once per actor, inside the actor's process."""

    def __init__(
        self, spec: UdfSpec, udf_schema: pa.Schema, schema: pa.Schema, step: str, tally: Any
    ) -> None:
        self.spec = spec
        self.udf_schema = udf_schema
        self.schema = schema
        self.step = step
        self.tally = tally
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[Future[BatchOutcome], Task]] = {}
        self._body = ActorBody(
            spec,
            udf_schema,
            step,
            deliver=self._delivered,
            on_hang=self._hung,
            name=f"vane-ray-actor-{os.getpid()}",
        )
        try:
            wait_ready(self._body.ready, spec.actor_start_timeout_s)
        except StartTimeout:
            raise ConfigurationError(
                f"{spec.verb} step `{step}`: the constructor did not finish within "
                f"actor_start_timeout_s={spec.actor_start_timeout_s:g} s on a Ray actor"
            ) from None

    def _delivered(self, token: int, result: BatchOutcome | BaseException) -> None:
        with self._lock:
            future, _ = self._waiting.pop(token)
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    def _hung(self, hang: Hang) -> None:
        """A plain call overran ``batch_timeout_s`` and cannot be stopped: its batch fails (a
        whole-batch failure under on_error), and the stuck thread is left behind."""
        with self._lock:
            future, task = self._waiting.pop(hang.token)
        text = f"the call did not finish within batch_timeout_s={hang.seconds:g} s"
        if self.spec.on_error == "raise":
            future.set_exception(
                UDFError(
                    f"{self.spec.verb} step `{self.step}` on input rows {task.rows}: {text}. "
                    f"It was stuck at: {hang.where}"
                )
            )
        else:
            future.set_result(
                failed_rows(self.spec, self.udf_schema, task.table, f"TimeoutError: {text}")
            )

    def __call__(self, batch: pa.Table) -> pa.Table:
        import ray

        reads = self.spec.reads
        shipped = batch.select(list(reads)) if reads is not None else batch
        # Ray retries the batch of an actor that died, as often as it takes (a lost node must
        # not fail the job); the tally counts each batch's starts, so that one that kills
        # every actor it meets is stopped here instead of retried forever.
        starts = ray.get(self.tally.started.remote(self.step, _fingerprint(shipped)))
        if starts > MAX_DEATHS_PER_BATCH:
            return self._poisoned(batch, shipped, starts - 1)
        token = next(self._tokens)
        task = Task(token, None, shipped)
        future: Future[BatchOutcome] = Future()
        with self._lock:
            self._waiting[token] = (future, task)
        self._body.submit(token, task)
        try:
            outcome = future.result()
        except BaseException as exc:
            # Ray pickles what an actor raises and would lose its cause (the user's exception):
            # it travels as bytes, rebuilt in the driver as the subprocess backend does.
            raise RemoteFailure(error_to_bytes(exc), str(exc)) from None
        return self._output(batch, outcome)

    def _poisoned(self, batch: pa.Table, shipped: pa.Table, deaths: int) -> pa.Table:
        text = (
            f"ActorDiedError: the batch killed the Ray actor that ran it {deaths} times (a "
            "crash, os._exit, or out of memory)"
        )
        if self.spec.on_error == "raise":
            error = ActorDiedError(
                f"{self.spec.verb} step `{self.step}`: a batch of {shipped.num_rows} rows killed "
                f"the Ray actor that ran it {deaths} times, so the job stops. On the Ray runner "
                "such a batch is not split to find its rows: run the step on the local runner "
                "with on_error='skip' to isolate them"
            )
            raise RemoteFailure(error_to_bytes(error), str(error))
        outcome = failed_rows(self.spec, self.udf_schema, shipped, text)
        return self._output(batch, outcome)

    def _output(self, batch: pa.Table, outcome: BatchOutcome) -> pa.Table:
        if outcome.rows_skipped or outcome.rows_nulled:
            import ray

            ray.get(
                self.tally.add.remote(
                    self.step, outcome.rows_skipped, outcome.rows_nulled, outcome.first_error
                )
            )
        if not self.spec.passthrough:
            return outcome.table
        if outcome.dropped:
            keep = np.ones(batch.num_rows, dtype=bool)
            keep[outcome.dropped] = False
            batch = batch.filter(pa.array(keep))
        return pa.Table.from_arrays(batch.columns + outcome.table.columns, schema=self.schema)


class RemoteFailure(Exception):
    """What a Ray actor raises for a failed batch: the error and its cause, encoded."""

    # No __init__ of its own: Ray rebuilds exceptions from their args, in more than one way.
    @property
    def payload(self) -> bytes:
        payload: bytes = self.args[0]
        return payload

    def __str__(self) -> str:
        return str(self.args[1]) if len(self.args) > 1 else "a UDF step failed on a Ray actor"

    def error(self) -> BaseException:
        """The error as the driver raises it: a ``UDFError`` catchable as the user's class."""
        error = error_from_bytes(self.payload)
        if isinstance(error, UDFError):
            return catchable(error)
        return error


def _fingerprint(table: pa.Table) -> str:
    """A batch, told apart from the others of its step by its size and its first and last rows
    (Ray retries a batch with the same rows)."""
    if not table.num_rows:
        return "empty"
    edges = pa.concat_tables([table.slice(0, 1), table.slice(table.num_rows - 1)])
    digest = hashlib.sha1(repr(edges.to_pylist()).encode(), usedforsecurity=False).hexdigest()
    return f"{table.num_rows}:{digest}"


class Tally:
    """One per action (a Ray actor): how often each batch was started, and rows that on_error
    skipped or nulled, per step."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Any]] = {}
        self.starts: dict[tuple[str, str], int] = {}

    def started(self, step: str, fingerprint: str) -> int:
        key = (step, fingerprint)
        self.starts[key] = self.starts.get(key, 0) + 1
        return self.starts[key]

    def add(self, step: str, skipped: int, nulled: int, first_error: str | None) -> None:
        counts = self.steps.setdefault(step, [0, 0, None])
        counts[0] += skipped
        counts[1] += nulled
        counts[2] = counts[2] or first_error

    def totals(self) -> dict[str, list[Any]]:
        return self.steps
