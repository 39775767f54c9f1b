"""A UDF step's actor on Ray: a thin host for the same one-actor pool that the local runner's
``subprocess_actor`` backend runs (``vane.execution.actors``), so construction, retries,
``on_error``, timeouts, the output contract and poison rows are the same code on every runner.

The UDF runs in a worker process of the Ray actor's own, not in the Ray actor: a row that
kills its process (a segfault, ``os._exit``, out of memory) kills only that worker, and the
pool bisects its batch exactly as it does locally, losing one row instead of a batch. Ray's
own restarts are left to what Ray is for: a Ray actor lost with its node is restarted and its
batches sent again, as often as it takes. (Counting a batch's restarts from Ray's side cannot
tell a retry from another batch that holds the same values, and fails a healthy job.)

The step's driver side (``hosts.py``) calls the actor from Ray's threads with two batches at
a time (an async UDF: up to ``max_concurrency_per_actor``); each call hands its batch to the
pool and waits for its outcome, so the worker has the next batch queued while it runs one
(``lowering.py`` says what that saves). A plain function still runs on one batch at a time:
the worker's body does that. Rows that ``on_error`` handled are counted by the action's tally
(``tally.py``), so the driver can warn as the local runner does. At the end of the action the
driver asks the actor to ``close``: the worker finishes and runs the UDF's ``teardown()``, and
then waits in the actor's process for the actor's next action, as a local worker waits in the
driver's (``actors/warm.py``), while the driver keeps the actor (``parked.py``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from vane._arrow import split_by_bytes
from vane._environ import NODE_ID_ENV
from vane.errors import UDFError
from vane.execution.accounting import StepCounts
from vane.execution.actors.ipc import error_from_bytes, error_to_bytes
from vane.execution.actors.subprocess import SubprocessPool
from vane.io.file_stores import FileStores
from vane.io.file_stores import install as install_file_stores
from vane.udf.failures import catchable
from vane.udf.runtime import BatchOutcome, Task
from vane.udf.spec import UdfSpec

if TYPE_CHECKING:
    from vane.execution.ray.tally import StepState
    from vane.execution.resume import Checkpoint

# How often a batch refused by its step's budget looks whether the admitted calls have ended.
_ADMITTED_POLL_SECONDS = 0.05  # read by vane.ai.node_server, which may not import this


class RayUdf:
    """Constructed once per actor, inside the actor's process (``hosts.RayHost``): starts
    the worker that constructs the UDF (its errors and ``actor_start_timeout_s`` as
    locally)."""

    def __init__(
        self,
        spec: UdfSpec,
        udf_schema: pa.Schema,
        schema: pa.Schema,
        step: str,
        *,
        tally: Any,
        key: int,
        file_stores: FileStores | None = None,
        checkpoint: Checkpoint | None = None,
        failed_rows: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``checkpoint``: a resumable write's saved answers of this step (see ``__call__``);
        ``failed_rows``: a write's error ledger wants the input rows ``on_error`` handled,
        which go to the tally with each batch's counts; ``environ``: what the worker's
        environment starts from (``hosts.RayHost``; this process's by default)."""
        import ray

        # The driver's storage options: this process's worker is sent them in turn.
        install_file_stores(file_stores)

        self.spec = spec
        self.schema = schema
        self.tally = tally
        self.key = key
        self.name = uuid.uuid4().hex  # this actor, to the tally (its calls overlap)
        self.checkpoint = checkpoint
        self.failed_rows = failed_rows
        self._tokens = itertools.count()
        # The step's time counts from its first actor's start: waited for, so that the tally
        # has noted it before this actor's first call begins. Starting (the model loading) is
        # work, not a wait for resources: the driver's watch must know it from such an actor.
        ray.get(tally.starting.remote(key, self.name))
        # The worker learns its node from this: a step that uses a server per node
        # (vane.ai.serve) sends its requests to this node's server (vane/ai/node_server.py).
        node = ray.get_runtime_context().get_node_id()
        environ = {**(os.environ if environ is None else environ), NODE_ID_ENV: node}
        # Ray gave this actor its GPUs (CUDA_VISIBLE_DEVICES): its one worker gets them all.
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        try:
            self._pool = SubprocessPool(
                replace(spec, min_actors=1, max_actors=1),
                udf_schema,
                step,
                visible,
                linger=True,
                environ=environ,
            )
            # Its requests per server as they change (an AI function's): to the tally, by
            # which the driver's progress line shows them
            self._pool.on_requests = lambda servers: tally.requests.remote(key, self.name, servers)
            # A resumable write's rerun may find every batch it is given answered: the worker
            # (and the model it loads) starts at the first it cannot answer, as locally.
            self._started = False
            self._closed = False
            self._starting = threading.Lock()
            if checkpoint is None:
                self._start()
        except BaseException:
            tally.gave_up.remote(key, self.name)
            raise
        tally.joined.remote(key, self.name)

    def _start(self) -> None:
        with self._starting:  # (calls overlap: the first to need the worker starts it)
            if not self._started:
                self._pool.start()
                self._started = True

    def __call__(self, batch: pa.Table) -> pa.Table:
        """The batch's answer: a resumable write's saved one (the function is not called),
        else the function's, saved before its rows go on. The actor writes the saved answers
        itself, into the store the driver opened: the answer is kept before it leaves the
        actor, whatever becomes of the driver (so the store must be on a path every node
        shares; on one machine it is). A batch is found again by its contents
        (``batch_digest``), which the driver cuts the same way on every run of the same
        input (``hosts.batches``)."""
        if self._closed:
            return self.schema.empty_table()  # its step has ended (see ``close``)
        reads = self.spec.reads
        shipped = batch.select(list(reads)) if reads is not None else batch
        self.tally.begin.remote(self.key, self.name)  # (a caller's calls run in order)
        digest: str | None = None
        saved: BatchOutcome | None = None
        admitted = False
        try:
            if self.checkpoint is not None:
                from vane.execution.resume import batch_digest

                digest = batch_digest(shipped)
                saved = self.checkpoint.get(digest)
            if saved is not None:
                outcome = saved
            else:
                admitted = self._admit()
                self._start()
                outcome = self._calls(shipped)
                if digest is not None and self.checkpoint is not None:
                    self.checkpoint.put([digest], [0], outcome, shipped.num_rows)  # kept first
        except BaseException as exc:
            self.tally.done.remote(self.key, self.name, StepCounts())
            if admitted:
                self.tally.release.remote(self.key)
            if self._closed and not isinstance(exc, KeyboardInterrupt | SystemExit):
                # Dropped by its step's early end: nobody reads this answer, and an error in
                # it would be logged by Ray as unhandled.
                return self.schema.empty_table()
            # Ray pickles what an actor raises and would lose its cause (the user's exception):
            # it travels as bytes, rebuilt in the driver as the subprocess backend does.
            raise RemoteFailure(error_to_bytes(exc), str(exc)) from None
        resumed = batch.num_rows if saved is not None else 0
        output = self._output(batch, outcome, resumed)
        if admitted:  # after its usage is in the tally (an actor's calls reach it in order)
            self.tally.release.remote(self.key)
        return output

    def _admit(self) -> bool:
        """Whether the step may spend more (a step with a budget asks the tally, which sums
        every actor's usage). Once it may not, the batch waits for the step's admitted calls
        (paid for, answered and kept) to end, and then fails the job with what was spent;
        the driver kills the step's actors at the first failure."""
        import ray

        budget = self.spec.budget
        if budget is None:
            return False
        if ray.get(self.tally.admit.remote(self.key, budget)):
            return True
        while ray.get(self.tally.admitted.remote(self.key)) > 0:
            time.sleep(_ADMITTED_POLL_SECONDS)
        state: StepState = ray.get(self.tally.totals.remote())[self.key]
        raise state.counts.over_budget(
            self.spec, self.spec.name, budget, kept=self.checkpoint is not None
        )

    def _calls(self, shipped: pa.Table) -> BatchOutcome:
        """Ray's batch as the UDF's calls: one, or with ``batch_bytes`` one per run of rows of
        at most that many bytes (a larger row alone), as the local stage cuts them; each call
        is sent when the one before it has answered, so the worker holds one at a time."""
        rows = shipped.num_rows
        pieces = (
            [shipped]
            if self.spec.batch_bytes is None
            else list(split_by_bytes(shipped, self.spec.batch_bytes)) or [shipped]
        )
        outcome: BatchOutcome | None = None
        offset = 0
        for piece in pieces:
            task = Task(next(self._tokens), offset, piece, batch_rows=rows)
            answer = self._pool.submit(task).result()
            outcome = answer if outcome is None else outcome.then(answer, offset)
            if outcome.failure is not None:  # (a unit's: Ray sends batches one by one)
                raise outcome.failure
            offset += piece.num_rows
        assert outcome is not None
        return outcome

    def close(self, *, early: bool = False) -> None:
        """The worker finishes its batches (``early``: those it has started) and runs the
        UDF's teardown(); once. (A killed actor's worker is killed with it.)"""
        if not self._closed:
            self._closed = True
            self._pool.teardown(graceful=True, early=early)
            if early:
                # The batches the worker dropped are never answered: their calls, waiting on
                # this host's threads, end now (the host may be kept for the next action).
                self._pool.drop_unanswered(RuntimeError("dropped: the step ended early"))
            self.tally.left.remote(self.key, self.name)

    def _output(self, batch: pa.Table, outcome: BatchOutcome, resumed: int) -> pa.Table:
        import ray

        counts = StepCounts.of_batch(batch.num_rows, outcome, resumed=resumed)
        failed = None
        if self.failed_rows and outcome.errors:
            # The rows themselves (every input column: the ledger picks its keys in the
            # driver), numbered afresh in the errors that go with them.
            taken = batch.take(pa.array([e.row for e in outcome.errors], pa.int64()))
            errors = [replace(e, row=i) for i, e in enumerate(outcome.errors)]
            failed = (taken, errors)
        # Waited for: the counts must be in before the driver reads the totals at the end.
        ray.get(self.tally.done.remote(self.key, self.name, counts, failed=failed))
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
