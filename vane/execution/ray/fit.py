"""Whether a plan's UDF steps fit the Ray cluster: checked when a step is built and again when
an action starts, so that a plan the cluster cannot run fails at once with the numbers.

Each UDF step starts its minimum number of actors as the action starts (``hosts.py``), every
step of the plan at once, and an actor holds its CPUs, GPUs and memory until its step ends.
The tasks that feed the actors (reading, row-local SQL, writing part files) need a CPU each:
if the actors hold every CPU, those tasks wait forever, and so do the actors (plain Ray Data
hangs the same way). So a plan fits when the actors' minimum, summed over its UDF steps, plus
one CPU for the tasks fits the cluster, and each actor fits on one node. A step's maximum is a
bound, not a need: a step adds an actor only while the cluster has room for it and a CPU for
the tasks besides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vane.errors import ConfigurationError
from vane.execution.ray.cluster import Cluster
from vane.plan.nodes import PlanNode, UdfStep
from vane.plan.traverse import walk
from vane.udf.spec import UdfSpec

# What the tasks that feed the actors need while they run: one at a time still makes progress.
TASK_CPUS = 1
_TASKS = "the tasks that feed the actors (reading, SQL steps, writing)"


def actor_resources(spec: UdfSpec) -> dict[str, Any]:
    """What one actor of the step reserves, as Ray Data's options: a GPU actor holds no CPU
    unless it asks for one."""
    resources: dict[str, Any] = {"num_cpus": spec.cpus if spec.cpus else (0 if spec.gpus else 1)}
    if spec.gpus:
        resources["num_gpus"] = spec.gpus
    if spec.memory:
        resources["memory"] = spec.memory
    return resources


@dataclass(frozen=True)
class Pool:
    """A UDF step's actor pool as the cluster sees it: the actors it starts with (its
    minimum), and what each one reserves."""

    step: UdfStep
    actors: int
    each: Mapping[str, float]  # CPU, GPU, memory: only those it reserves

    @property
    def name(self) -> str:
        return self.step.udf.name

    def needs(self, resource: str) -> float:
        return self.actors * self.each.get(resource, 0.0)

    def describe(self, resource: str) -> str:
        """ "2 actors x 1 CPU for `Embedder` (concurrency=2)" """
        spec = self.step.udf
        concurrency = (
            f"concurrency={spec.min_actors}"
            if spec.min_actors == spec.max_actors
            else f"the minimum of concurrency=({spec.min_actors}, {spec.max_actors})"
        )
        actors = "1 actor" if self.actors == 1 else f"{self.actors} actors"
        each = amount(resource, self.each[resource])
        return f"{actors} x {each} for `{self.name}` ({concurrency})"


def pools(plan: PlanNode) -> list[Pool]:
    """Every UDF step's pool, the step nearest the plan's top first (the one just built)."""
    found = []
    for node in walk(plan):
        if isinstance(node, UdfStep):
            ray = actor_resources(node.udf)
            each = {"CPU": float(ray["num_cpus"])}
            if "num_gpus" in ray:
                each["GPU"] = float(ray["num_gpus"])
            if "memory" in ray:
                each["memory"] = float(ray["memory"])
            found.append(Pool(node, node.udf.min_actors, each))
    return found


def amount(resource: str, value: float) -> str:
    """ "1 CPU", "2 GPUs", "1.5 GiB of memory" """
    if resource == "memory":
        return f"{value / 2**30:.1f} GiB of memory"
    return f"{value:g} {resource}{'s' * (value != 1)}"


def check_fits(plan: PlanNode, cluster: Cluster) -> None:
    """Fail, saying what is needed, what the cluster has and what to change, if the plan's
    actors and the tasks that feed them cannot all hold their resources at once."""
    found = pools(plan)
    if not found:
        return
    for resource in ("GPU", "memory"):
        _check_total(found, resource, cluster.total.get(resource, 0.0))
    _check_cpus(found, cluster.total.get("CPU", 0.0))
    for pool in found:
        if pool.step.udf.driver_node is not None:
            _check_driver_node(pool, cluster.driver)
        else:
            _check_one_node(pool, cluster.nodes)


def _check_driver_node(pool: Pool, driver: Mapping[str, float] | None) -> None:
    """A step whose actors run on the driver's node (``UdfSpec.driver_node``) waits forever if
    that node cannot hold one of them: say so now."""
    wanted = {r: v for r, v in pool.each.items() if v}
    if driver is not None and all(driver.get(r, 0.0) >= v for r, v in wanted.items()):
        return
    spec = pool.step.udf
    has = (
        "is not a node of the cluster"
        if driver is None
        else f"has {', '.join(amount(r, driver.get(r, 0.0)) for r in wanted)}"
    )
    raise ConfigurationError(
        f"{spec.verb} step `{pool.name}` runs its actors on the driver's node ({spec.driver_node}"
        f"); one actor needs {', '.join(amount(r, v) for r, v in wanted.items())}, and the "
        f"driver's node {has}. Run the driver on a node of the cluster with room for it, or run "
        "the job with vane.configure(runner='local')"
    )


def _check_one_node(pool: Pool, nodes: Sequence[Mapping[str, float]]) -> None:
    """An actor runs on one node: a cluster whose total would do, and no node of which
    has room for one actor, would leave it waiting forever."""
    wanted = {r: v for r, v in pool.each.items() if v}
    if not nodes or any(all(n.get(r, 0.0) >= v for r, v in wanted.items()) for n in nodes):
        return
    largest = max(nodes, key=lambda n: tuple(n.get(r, 0.0) for r in wanted))
    spec = pool.step.udf
    raise ConfigurationError(
        f"{spec.verb} step `{pool.name}`: one actor needs "
        f"{', '.join(amount(r, v) for r, v in wanted.items())}, and no node of the Ray cluster "
        f"has that much (the largest: {', '.join(amount(r, largest.get(r, 0.0)) for r in wanted)})."
        " An actor runs on one node: lower cpus, gpus or memory, or add a bigger node"
    )


def _check_total(found: list[Pool], resource: str, has: float) -> None:
    using = [p for p in found if p.needs(resource)]
    needed = sum(p.needs(resource) for p in using)
    if needed <= has + 1e-9:
        return
    first = using[0]
    option, more = {"GPU": ("gpus", "GPUs"), "memory": ("memory", "more memory")}[resource]
    shown = (
        f"{needed / 2**30:.1f} GiB vs {has / 2**30:.1f} GiB"
        if resource == "memory"
        else f"{needed:g} vs {has:g}"
    )
    raise ConfigurationError(
        f"{first.step.udf.verb} step `{first.name}` cannot start on this Ray cluster: the "
        f"pipeline needs {_listed([p.describe(resource) for p in using])}, "
        f"{amount(resource, needed)} in all, and the cluster has {amount(resource, has)} "
        f"({shown}). Actors hold theirs until their step ends, so the step would wait "
        f"forever: lower concurrency or {option}"
        f"{' of a step' if len(using) > 1 else ''}, or add nodes with {more}"
    )


def _check_cpus(found: list[Pool], has: float) -> None:
    using = [p for p in found if p.needs("CPU")]
    held = sum(p.needs("CPU") for p in using)
    needed = held + TASK_CPUS
    if needed <= has + 1e-9:
        return
    if not using:  # GPU actors only: nothing holds a CPU, and there is none for the tasks
        raise ConfigurationError(
            f"the Ray cluster has {amount('CPU', has)}, and {_TASKS} need "
            f"{amount('CPU', TASK_CPUS)} ({needed:g} vs {has:g}). "
            "Add a node with CPUs to the cluster"
        )
    first = using[0]
    spec = first.step.udf
    parts = _listed([*(p.describe("CPU") for p in using), f"1 CPU for {_TASKS}"])
    raise ConfigurationError(
        f"{spec.verb} step `{first.name}` cannot start on this Ray cluster: the pipeline "
        f"needs {parts}, {amount('CPU', needed)} in all, and the cluster has "
        f"{amount('CPU', has)} ({needed:g} vs {has:g}). Actors hold their CPUs until their "
        "step ends, so with none left over, the tasks that feed them would wait forever. "
        f"{_cpu_fixes(first, using, has)}"
    )


def _cpu_fixes(first: Pool, using: list[Pool], has: float) -> str:
    """What would make ``first`` fit, the other steps as they are."""
    spec = first.step.udf
    per = first.each["CPU"]
    room = has - TASK_CPUS - sum(p.needs("CPU") for p in using if p is not first)
    fixes = []
    if room >= per:
        fit = int(room // per)
        fixes.append(
            f"concurrency={fit} (or concurrency=({fit}, {max(spec.max_actors, fit + 1)}), to "
            "add actors when there is room)"
            if spec.min_actors == spec.max_actors
            else f"concurrency=({fit}, {spec.max_actors})"
        )
    cpus = math.floor(room / first.actors * 100) / 100
    if cpus > 0:
        fixes.append(f"cpus={cpus:g}")
    fixes.append("a cluster with more CPUs")
    others = ", or lower the concurrency or cpus of another step" if len(using) > 1 else ""
    return f"Use {', or '.join(fixes)}{others}"


def _listed(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
