"""The resource watch (``waits.py``) connected to Ray: what a poll samples from the cluster,
and the Ray Data execution callback that counts an execution's progress and stops it, raising
the watch's failure in Ray Data's scheduling loop. Ray Data then shuts the execution down
(its actors and pending tasks go, their resources are freed) and hands the error to whoever
reads the dataset."""

from __future__ import annotations

import contextlib
from typing import Any

from ray.data._internal.execution.execution_callback import ExecutionCallback
from ray.data.exceptions import ExecutionTimeoutError

from vane.execution.ray.cluster import ray_module
from vane.execution.ray.waits import Load, ResourceWatch

# The key under which an action's Ray datasets carry their watch, in their DataContext.
CONTEXT_KEY = "vane.resource_watch"


class WaitTimedOut(ExecutionTimeoutError):
    """Stops a Ray Data execution whose action waited too long for resources (the action
    raises its watch's ``ResourceWaitError`` instead). An ``ExecutionTimeoutError``, so that
    Ray Data stops without logging it as a bug of its own."""


class Watching(ExecutionCallback):
    """Ray Data makes one per execution, from the dataset's context."""

    watch: ResourceWatch | None = None

    def before_execution_starts(self, executor: Any) -> None:
        context = getattr(executor, "_data_context", None)
        key = context.get_config(CONTEXT_KEY) if context is not None else None
        self.watch = ResourceWatch.of(key)

    def on_execution_step(self, executor: Any) -> None:
        watch = self.watch
        if watch is None:
            return
        watch.moved(id(executor), _progress(executor))
        if watch.failure is not None:
            raise WaitTimedOut(str(watch.failure))


def _progress(executor: Any) -> tuple[int, ...]:
    """What Ray Data's own no-progress guard counts: outputs taken, tasks finished, blocks
    queued, per operator (nothing, if this version of Ray Data keeps them elsewhere)."""
    counts = []
    for op, state in getattr(executor, "_topology", {}).items():
        metrics = getattr(op, "metrics", None)
        counts.append(getattr(metrics, "num_outputs_taken", 0))
        counts.append(getattr(metrics, "num_tasks_finished", 0))
        with contextlib.suppress(Exception):  # an internal of Ray Data's: without it, less is seen
            counts.append(state.total_enqueued_input_blocks())
    return tuple(counts)


def watched(dataset: Any, watch: ResourceWatch) -> Any:
    """``dataset``, its executions watched (a dataset derived from it shares its context)."""
    context = dataset.context
    context.set_config(CONTEXT_KEY, watch.key)
    if Watching not in context.custom_execution_callback_classes:
        context.custom_execution_callback_classes.append(Watching)
    return dataset


def cluster_load() -> Load:
    """The cluster's resources in all, those free, and the requests (task or actor shapes,
    each once) it has not placed; None for those when the cluster does not say (a Ray
    client connection, a Ray without the autoscaler's status)."""
    ray = ray_module()
    try:
        from ray.autoscaler.v2.sdk import get_cluster_status

        status = get_cluster_status(ray.get_runtime_context().gcs_address)
    except Exception:  # what Ray can tell varies: fall back to what it always can
        return dict(ray.cluster_resources()), dict(ray.available_resources()), None
    total = {u.resource_name: float(u.total) for u in status.cluster_resource_usage}
    free = {u.resource_name: float(u.total - u.used) for u in status.cluster_resource_usage}
    pending: list[dict[str, float]] = []
    for demand in status.resource_demands.ray_task_actor_demand:
        for request in demand.bundles_by_count:
            shape = {k: float(v) for k, v in request.bundle.items()}
            if request.count and shape not in pending:
                pending.append(shape)
    return total, free, pending
