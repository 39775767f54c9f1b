"""Actor pools: thread and subprocess backends behind one interface (``base.ActorPool``)."""

from __future__ import annotations

import pyarrow as pa

from vane.errors import ConfigurationError
from vane.execution.actors.base import ActorPool
from vane.execution.resources import gpus_needed, total_memory, usable_cpus, visible_gpus
from vane.udf.spec import UdfSpec


def check_resources(spec: UdfSpec, step: str) -> list[str]:
    """The visible GPU ids, or an error before anything runs if the machine cannot give every
    actor what the step asks for (rather than a step that waits forever)."""
    actors = spec.max_actors
    if spec.cpus:
        cores = usable_cpus()
        if actors * spec.cpus > cores:
            raise ConfigurationError(
                f"{spec.verb} step `{step}` asks for {actors * spec.cpus:g} CPU(s) (concurrency "
                f"{actors} x cpus {spec.cpus:g}), and this process may use {cores}. Lower "
                "concurrency or cpus"
            )
    memory = total_memory()
    if spec.memory and memory is not None and actors * spec.memory > memory:
        raise ConfigurationError(
            f"{spec.verb} step `{step}` asks for {actors * spec.memory / 2**30:.1f} GiB of memory "
            f"(concurrency {actors} x memory {spec.memory / 2**30:.1f} GiB), and this machine "
            f"has {memory / 2**30:.1f} GiB. Lower concurrency or memory"
        )
    if not spec.gpus:
        return []
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
