"""Actor pools: thread and subprocess backends behind one interface (``base.ActorPool``), each
hosting the same actor body (``body.ActorBody``)."""

from __future__ import annotations

import pyarrow as pa

from vane.errors import ConfigurationError
from vane.execution.actors.base import ActorPool
from vane.execution.resources import check_resources
from vane.udf.spec import UdfSpec


def prestart_workers(steps: list[tuple[UdfSpec, str]]) -> None:
    """Start the worker processes that the subprocess steps among ``steps`` (each a spec and
    its step's name) will need, while the action plans and opens its input (``warm.py``)."""
    wanted = []
    for spec, step in steps:
        if spec.backend in ("subprocess_actor", "subprocess_task"):
            try:
                wanted.append((spec, check_resources(spec, step)))
            except ConfigurationError:
                continue  # the step's own start says what is wrong
    if wanted:
        from vane.execution.actors.subprocess import prestart

        prestart(wanted)


def make_pool(spec: UdfSpec, schema: pa.Schema, step: str) -> ActorPool:
    visible = check_resources(spec, step)
    if spec.backend == "thread":
        from vane.execution.actors.thread import ThreadPool

        return ThreadPool(spec, schema, step)
    if spec.backend in ("subprocess_actor", "subprocess_task"):
        from vane.execution.actors.subprocess import SubprocessPool

        return SubprocessPool(spec, schema, step, visible)
    raise ConfigurationError(
        f"execution_backend={spec.backend!r} needs the Ray runner: call "
        "vane.configure(runner='ray') before building the plan"
    )
