"""A pipeline on Ray never waits silently for resources: one that cannot fit the cluster fails
before anything runs, saying what to change (issue 25 item 1: two actors of 1 CPU on a 2-CPU
machine left none for reading, and the job sat at "starting" forever); one that waits for what
other work holds says so on its progress line, then fails after resource_wait_timeout_s.

The session's cluster has 4 CPUs and 4 GPUs; "other work" here is an actor that holds them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from tests.conformance.test_backends import N, double
from vane.config import Config
from vane.errors import ConfigurationError, ResourceWaitError
from vane.observe.events import StageWaiting, subscribe

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SCHEMA = {"id": "BIGINT", "v": "BIGINT"}
EXPECTED = [{"id": i, "v": i * 2} for i in range(N)]


def test_actors_that_would_take_every_cpu_fail_before_anything_runs(on_ray):
    # Without the check this pipeline hangs: 4 actors hold the 4 CPUs, the read task waits
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)") as info:
        vane.range(N).map_batches(double, schema=SCHEMA, concurrency=4).to_pylist()
    assert "4 actors x 1 CPU for `double` (concurrency=4)" in str(info.value)
    assert "Use concurrency=3" in str(info.value)


def test_steps_that_each_fit_but_not_together_fail_when_the_second_is_built(on_ray):
    first = vane.range(N).map_batches(double, schema=SCHEMA, concurrency=2)
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)"):
        first.map_batches(lambda b: b, schema=SCHEMA, concurrency=2).to_pylist()


def test_column_udfs_are_checked_when_the_action_starts(on_ray):
    @vane.cls(max_concurrency=4)
    class Twice:
        def __call__(self, value: int) -> int:
            return value * 2

    rel = vane.range(N).with_column("v", Twice()(vane.col("id")))
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)"):
        rel.to_pylist()


def test_an_autoscaling_pool_whose_maximum_exceeds_the_cluster_runs(on_ray):
    rows = (
        vane.range(N)
        .map_batches(double, schema=SCHEMA, batch_size=10, concurrency=(1, 16))
        .to_pylist()
    )
    assert rows == EXPECTED


class WaitsForASecondActor:
    """Holds every batch until two instances have been built (each leaves ``<pid>.born``): one
    actor alone never answers, so the step must add a second while its batches wait."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        (self.directory / f"{os.getpid()}.born").touch()

    def __call__(self, batch: pa.Table) -> pa.Table:
        deadline = time.monotonic() + 120  # a guard against hanging, not a measure
        while len(list(self.directory.glob("*.born"))) < 2:
            if time.monotonic() > deadline:
                raise TimeoutError("the step never added a second actor")
            time.sleep(0.01)
        return batch


def test_a_step_adds_actors_up_to_its_maximum_while_batches_wait(tmp_path, on_ray):
    rows = (
        vane.range(200)
        .map_batches(
            WaitsForASecondActor,
            schema={"id": "BIGINT"},
            batch_size=10,
            concurrency=(1, 2),
            fn_constructor_args=(str(tmp_path),),
        )
        .to_pylist()
    )
    assert [r["id"] for r in rows] == list(range(200))
    assert len(list(tmp_path.glob("*.born"))) == 2  # grown to its maximum, and not past it


class _Holder:
    def ping(self) -> int:
        return 1


@pytest.fixture
def held(on_ray) -> Iterator[object]:
    """``held(num_cpus=..., num_gpus=...)``: other work on the cluster, holding those until
    the test ends; and a short resource_wait_timeout_s, restored after."""
    ray = on_ray
    holders = []

    def hold(**resources: float) -> object:
        holder = ray.remote(**resources)(_Holder).remote()
        ray.get(holder.ping.remote())  # placed: it holds them now
        holders.append(holder)
        return holder

    vane.configure(resource_wait_timeout_s=2)
    yield hold
    vane.configure(resource_wait_timeout_s=Config().resource_wait_timeout_s)
    for holder in holders:
        ray.kill(holder)


def _waits(run) -> tuple[ResourceWaitError, list[str | None]]:
    states: list[str | None] = []
    unsubscribe = subscribe(
        lambda e: states.append(e.state) if isinstance(e, StageWaiting) else None
    )
    try:
        with pytest.raises(ResourceWaitError) as info:
            run()
    finally:
        unsubscribe()
    return info.value, states


def test_an_actor_waiting_for_gpus_that_other_work_holds_is_shown_then_fails(held, on_ray):
    held(num_cpus=0, num_gpus=4)
    error, states = _waits(
        lambda: vane.range(N).map_batches(double, schema=SCHEMA, gpus=1).to_pylist()
    )
    why = "1 actor of `double`): 4 of 4 GPUs held by other work on the cluster"
    assert states[0] == f"waiting for 1 GPU ({why}"
    assert "waited" in str(error) and "for 1 GPU for 1 actor of `double`: 4 of 4 GPUs" in str(error)
    assert "resource_wait_timeout_s" in str(error)


@pytest.mark.parametrize(
    "source",
    [
        lambda: vane.range(N),  # a read task waits
        lambda: vane.from_arrow(pa.table({"id": range(N)})),  # Ray Data's metadata task waits
    ],
    ids=["range", "arrow"],
)
def test_tasks_waiting_for_cpus_that_other_work_holds_are_shown_then_fail(held, source):
    held(num_cpus=4)
    step = source().map_batches(double, schema=SCHEMA, gpus=1)  # its actors need no CPU
    error, states = _waits(step.to_pylist)
    why = "a read, SQL or write task): 4 of 4 CPUs held by other work on the cluster"
    assert states[0] == f"waiting for 1 CPU ({why}"
    assert "for 1 CPU for a read, SQL or write task: 4 of 4 CPUs" in str(error)


def test_what_waited_is_released_when_the_action_gives_up(held, on_ray):
    holder = held(num_cpus=0, num_gpus=4)
    _waits(lambda: vane.range(N).map_batches(double, schema=SCHEMA, gpus=1).count())
    on_ray.kill(holder)
    # Had the waiting actor been left pending, it would take a GPU now, and this pipeline's
    # fourth actor would wait for it
    vane.configure(resource_wait_timeout_s=60)
    rows = vane.range(N).map_batches(double, schema=SCHEMA, gpus=1, concurrency=4).to_pylist()
    assert rows == EXPECTED


def _no_parts() -> list:
    return []


def test_a_write_task_that_cannot_start_ends_with_the_watch(on_ray):
    # Part files are written by Ray tasks of vane's own, outside Ray Data's executions: their
    # wait ends when the watch gives up on the action
    from vane.execution.ray.runner import _written
    from vane.execution.ray.waits import ResourceWatch

    watch = ResourceWatch([], timeout_s=1)
    watch.failure = ResourceWaitError("given up")
    never = on_ray.remote(num_cpus=64)(_no_parts).remote()  # no node has 64 CPUs
    with pytest.raises(ResourceWaitError, match="given up"):
        _written(never, watch)
