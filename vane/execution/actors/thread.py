"""Thread actors: each actor is an ``ActorBody`` on a thread of the driver process, with its own
UDF instance, constructed on that thread. Right for GIL-releasing (torch, numpy, DuckDB) and
I/O-bound or async UDFs.

A thread cannot be killed. A call that overruns ``batch_timeout_s`` (or a constructor that
overruns ``actor_start_timeout_s``) is given up on: its batch is handled as lost (see
``recovery.py``), a replacement actor is started, and the thread, a daemon, is left to finish or
not; whatever it holds (memory, a GPU, a connection) stays in use until the process exits.
"""

from __future__ import annotations

import functools

from vane.execution.actors.base import Actor, ActorPool, wait_ready
from vane.execution.actors.body import ActorBody, Hang
from vane.execution.actors.recovery import Loss
from vane.execution.model_bars import quiet_while_constructing
from vane.udf.runtime import Task


class ThreadActor(Actor):
    abandon_note = (
        "; its thread cannot be stopped and is left running in the background, holding what it "
        "allocated until this process exits"
    )

    def __init__(self, pool: ActorPool, index: int, gpu_share: int) -> None:
        super().__init__(pool, index, gpu_share)
        self._body = ActorBody(
            pool.spec,
            pool.schema,
            pool.step,
            deliver=self._delivered,
            on_hang=self._hung,
            name=f"vane-actor-{index}",
            # In the user's process: model libraries' bars are off while the model loads only.
            constructing=quiet_while_constructing,
            report=functools.partial(pool.report_requests, index),
        )

    def wait_ready(self, timeout: float | None) -> None:
        wait_ready(self._body.ready, timeout)

    def _send(self, token: int, task: Task) -> None:
        self._body.submit(token, task)

    def _hung(self, hang: Hang) -> None:
        loss = Loss(
            True,
            f"the call did not finish within batch_timeout_s={hang.seconds:g} s",
            hang.attempt,
            hang.where,
        )
        self._body.stop(graceful=False)
        self._lose(lambda _, token: loss if token == hang.token else None)

    def stop(self, *, graceful: bool = True, early: bool = False) -> None:
        self.stopping = True
        self._body.stop(graceful=graceful, early=early)
        if graceful:  # every batch is done (or dropped): the thread ends after teardown()
            self._body.join()


class ThreadPool(ActorPool):
    def _start_actor(self, index: int, gpu_share: int) -> Actor:
        return ThreadActor(self, index, gpu_share)
