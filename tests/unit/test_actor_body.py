"""An actor's body (vane/execution/actors/body.py) says whether its UDF is over: a worker whose
UDF's teardown() still runs, or whose call it gave up on, must not serve the next action's UDF
(``_worker.main`` keeps a worker only when ``completed``)."""

from __future__ import annotations

import threading

import pyarrow as pa

from tests.integration.support import udf_spec
from vane.execution.actors.body import ActorBody
from vane.udf.runtime import Task
from vane.udf.spec import UdfSpec

SCHEMA = pa.schema([("x", pa.int64())])
GO_ON = threading.Event()  # what the UDF below waits for (set by each test when it may end)


class WaitsForLeave:
    """Answers at once, or waits for ``GO_ON`` in its call (``wait_in_call``); its teardown()
    waits for ``GO_ON``."""

    def __init__(self, wait_in_call: bool = False) -> None:
        self.wait_in_call = wait_in_call

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.wait_in_call:
            GO_ON.wait(120)
        return batch

    def teardown(self) -> None:
        GO_ON.wait(120)


def _spec(wait_in_call: bool = False, **changes: object) -> UdfSpec:
    return udf_spec(WaitsForLeave, constructor_args=(wait_in_call,), **changes)


def _body(spec: UdfSpec, hangs: list[object]) -> ActorBody:
    body = ActorBody(
        spec, SCHEMA, "step `s`", deliver=lambda token, result: None, on_hang=hangs.append, name="t"
    )
    body.ready.result(timeout=120)
    return body


def test_a_body_whose_teardown_still_runs_has_not_completed():
    GO_ON.clear()
    body = _body(_spec(), [])
    body.stop(graceful=True)
    body.join(0.05)  # (the teardown waits for GO_ON: it cannot have ended)
    assert not body.completed
    GO_ON.set()
    body.join(120)
    assert body.completed


def test_a_body_given_up_on_never_completes():
    GO_ON.clear()
    hangs: list[object] = []
    body = _body(_spec(wait_in_call=True, batch_timeout_s=0.2), hangs)
    body.submit(0, Task(0, 0, pa.table({"x": [1, 2]})))
    body.join(120)  # given up on: the call overran batch_timeout_s (it waits for GO_ON)
    assert len(hangs) == 1 and not body.completed
    body.stop(graceful=True)
    GO_ON.set()  # the call returns, and the thread ends after all: still not completed
    body._thread.join(120)
    assert not body.completed
