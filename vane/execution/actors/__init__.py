"""Actor pools: thread and subprocess backends behind one interface (``base.ActorPool``)."""

from __future__ import annotations

import pyarrow as pa

from vane.errors import ConfigurationError
from vane.execution.actors.base import ActorPool
from vane.execution.resources import gpus_needed, visible_gpus
from vane.udf.spec import UdfSpec


def check_gpus(spec: UdfSpec, step: str) -> list[str]:
    """The visible devices, or an error before anything runs if there are too few."""
    visible = visible_gpus()
    needed = gpus_needed(spec.max_actors, spec.gpus)
    if needed > len(visible):
        found = ", ".join(visible) if visible else "none"
        raise ConfigurationError(
            f"{spec.verb} step `{step}` asks for {needed} GPU(s) (concurrency {spec.max_actors} "
            f"x gpus {spec.gpus}), and this machine shows {len(visible)} (visible devices: "
            f"{found}). Lower concurrency or gpus, set CUDA_VISIBLE_DEVICES, or use "
            "vane.configure(runner='ray') on a cluster with enough GPUs"
        )
    return visible


def make_pool(spec: UdfSpec, schema: pa.Schema, step: str) -> ActorPool:
    visible = check_gpus(spec, step) if spec.gpus else []
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
