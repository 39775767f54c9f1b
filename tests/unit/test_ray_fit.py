"""Whether a plan fits a Ray cluster (``vane.execution.ray.fit``), decided from the plan and
the cluster's numbers: every UDF step's minimum pool at once, plus one CPU for the tasks that
feed the actors, and each actor on one node. What the error advises must make the plan fit."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vane
from vane.errors import ConfigurationError
from vane.execution.ray.cluster import Cluster
from vane.execution.ray.fit import check_fits
from vane.plan.nodes import PlanNode, UdfStep


def _noop(batch):
    return batch


BASE = vane.range(3).map_batches(_noop, schema={"id": "BIGINT"})._plan
assert isinstance(BASE, UdfStep)


def chain(*steps: dict) -> PlanNode:
    """UDF steps one over the other, each ``dict(actors=(min, max), cpus=, gpus=, memory=)``,
    named s0, s1, ... (built as plan nodes: the local runner would check them against this
    machine)."""
    plan: PlanNode = BASE.input
    for number, step in enumerate(steps):
        low, high = step.get("actors", (1, 1))
        spec = replace(
            BASE.udf,
            min_actors=low,
            max_actors=high,
            cpus=step.get("cpus"),
            gpus=step.get("gpus", 0),
            memory=step.get("memory"),
            label=f"s{number}",
        )
        plan = UdfStep(plan, spec, BASE.declared)
    return plan


def one_node(cpus: float, gpus: float = 0, memory: float = 2**40) -> Cluster:
    node = {"CPU": cpus, "GPU": gpus, "memory": memory}
    return Cluster(node, [node])


def fits(plan: PlanNode, cluster: Cluster) -> bool:
    try:
        check_fits(plan, cluster)
    except ConfigurationError:
        return False
    return True


def test_two_actors_of_one_cpu_leave_nothing_for_reading_on_two_cpus():
    # docs/ray.md's first example as it was: it hung on a 2-CPU machine (issue 25 item 1)
    plan = chain({"actors": (2, 2)})
    with pytest.raises(ConfigurationError) as info:
        check_fits(plan, one_node(2))
    message = str(info.value)
    assert "2 actors x 1 CPU for `s0` (concurrency=2)" in message
    tasks = "the tasks that feed the actors (reading, SQL steps, writing)"
    assert f"1 CPU for {tasks}, 3 CPUs in all" in message
    assert "the cluster has 2 CPUs (3 vs 2)" in message
    assert "Use concurrency=1 (or concurrency=(1, 2), to add actors when there is room)" in message
    assert "or cpus=0.5, or a cluster with more CPUs" in message
    check_fits(plan, one_node(3))


def test_the_steps_of_a_pipeline_need_their_actors_at_once():
    plan = chain({"actors": (2, 2)}, {"actors": (2, 8)})  # each alone fits 4 CPUs
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)") as info:
        check_fits(plan, one_node(4))
    assert "2 actors x 1 CPU for `s1` (the minimum of concurrency=(2, 8))" in str(info.value)
    assert "lower the concurrency or cpus of another step" in str(info.value)
    check_fits(plan, one_node(5))


def test_a_pools_maximum_is_a_bound_not_a_need():
    check_fits(chain({"actors": (1, 64)}), one_node(2))


def test_gpu_actors_hold_no_cpu_but_the_tasks_still_need_one():
    check_fits(chain({"actors": (4, 4), "gpus": 1}), one_node(1, gpus=4))
    with pytest.raises(ConfigurationError, match=r"need 1 CPU .*\(1 vs 0\)"):
        check_fits(chain({"actors": (4, 4), "gpus": 1}), one_node(0, gpus=4))
    with pytest.raises(ConfigurationError, match=r"2 actors x 1 GPU for `s0`.*\(2 vs 1\)"):
        check_fits(chain({"actors": (2, 2), "gpus": 1}), one_node(4, gpus=1))


def test_memory_is_summed_over_the_steps():
    gib = 2**30
    plan = chain({"memory": 3 * gib}, {"memory": 3 * gib})
    check_fits(plan, one_node(4, memory=6 * gib))
    with pytest.raises(ConfigurationError, match=r"6\.0 GiB vs 5\.0 GiB"):
        check_fits(plan, one_node(4, memory=5 * gib))


def test_an_actor_runs_on_one_node():
    # Enough CPUs and GPUs in all, but no node has one GPU and two CPUs together
    nodes = [{"CPU": 4.0, "GPU": 0.0}, {"CPU": 1.0, "GPU": 1.0}]
    cluster = Cluster({"CPU": 5.0, "GPU": 1.0}, nodes)
    with pytest.raises(ConfigurationError, match="no node of the Ray cluster has that much"):
        check_fits(chain({"cpus": 2, "gpus": 1}), cluster)
    check_fits(chain({"cpus": 1, "gpus": 1}), cluster)


def test_a_step_kept_on_the_drivers_node_must_fit_there():
    """A Batch API step journals on the driver's disk, so its actors run on the driver's node:
    a cluster with room elsewhere only would leave them waiting forever."""
    pinned = replace(chain({"cpus": 2}), udf=replace(BASE.udf, cpus=2, driver_node="a journal"))
    small, big = {"CPU": 1.0}, {"CPU": 8.0}
    check_fits(pinned, Cluster({"CPU": 9.0}, [small, big], driver=big))
    with pytest.raises(ConfigurationError, match=r"driver's node \(a journal\).*has 1 CPU"):
        check_fits(pinned, Cluster({"CPU": 9.0}, [small, big], driver=small))
    with pytest.raises(ConfigurationError, match="is not a node of the cluster"):
        check_fits(pinned, Cluster({"CPU": 9.0}, [small, big], driver=None))
    check_fits(chain({"cpus": 2}), Cluster({"CPU": 9.0}, [small, big], driver=small))


steps = st.lists(
    st.fixed_dictionaries(
        {
            "actors": st.integers(1, 4).flatmap(lambda n: st.tuples(st.just(n), st.integers(n, 8))),
            "cpus": st.sampled_from([None, 0.25, 0.5, 1, 2]),
            "gpus": st.sampled_from([0, 0.5, 1]),
        }
    ),
    min_size=1,
    max_size=3,
)


@given(steps, st.integers(0, 12), st.integers(0, 6))
def test_a_plan_fits_when_its_minimum_pools_and_a_cpu_for_the_tasks_do(steps, cpus, gpus):
    def held(step: dict) -> float:
        per = step["cpus"] if step["cpus"] else (0 if step["gpus"] else 1)
        return step["actors"][0] * per

    expected = (
        sum(held(s) for s in steps) + 1 <= cpus
        and sum(s["actors"][0] * s["gpus"] for s in steps) <= gpus
    )
    assert fits(chain(*steps), one_node(cpus, gpus)) == expected


@given(steps, st.integers(1, 12))
def test_what_the_error_advises_makes_the_plan_fit(steps, cpus):
    steps = [{**s, "gpus": 0} for s in steps]  # CPUs only: the advice is about them
    plan = chain(*steps)
    cluster = one_node(cpus)
    try:
        check_fits(plan, cluster)
    except ConfigurationError as error:
        message = str(error)
    else:
        return
    top = steps[-1]  # the step named first: the one nearest the plan's top
    advised = re.search(r"Use concurrency=(\d+) ", message) or re.search(
        r"Use concurrency=\((\d+), \d+\)", message
    )
    if advised:
        low = int(advised[1])
        assert fits(
            chain(*steps[:-1], {**top, "actors": (low, max(low, top["actors"][1]))}), cluster
        )
    cpus_advised = re.search(r"cpus=([\d.]+)", message)
    if cpus_advised:
        assert fits(chain(*steps[:-1], {**top, "cpus": float(cpus_advised[1])}), cluster)
    assert advised or cpus_advised or "of another step" in message or len(steps) == 1
