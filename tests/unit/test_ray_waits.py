"""Whether a Ray action waits for resources, what the progress line says about it, and when it
fails (``vane.execution.ray.waits``): decided from what a poll saw and the time it is given, so
these tests state the samples and the times, and assert what was decided."""

from __future__ import annotations

import math

import pytest

import vane
from tests.unit.test_ray_fit import chain
from vane.config import Config
from vane.errors import ConfigurationError, ResourceWaitError
from vane.execution.ray.fit import pools
from vane.execution.ray.waits import NOTICE_S, ResourceWatch, Sample, decide

TASK = {"CPU": 1.0}


def sample(plan_pools, **given) -> Sample:
    """A poll in which the driver waits on Ray and nothing works, unless ``given`` says."""
    values = {
        "moved": 0,
        "working": False,
        "pulling": True,
        "actors": {p.step.step_id: p.actors for p in plan_pools},
        "total": {"CPU": 2.0},
        "free": {"CPU": 0.0},
        "pending": [TASK],
    }
    values.update(given)
    return Sample(**values)


def test_actors_that_hold_every_cpu_starve_the_tasks():
    # The hang of issue 25 item 1, as the watch sees it: two actors of 1 CPU up on 2 CPUs, a
    # read task that finds none
    found = pools(chain({"actors": (2, 2)}))
    wait = decide(found, sample(found))
    assert wait is not None
    assert wait.line() == (
        "waiting for 1 CPU (a read, SQL or write task): 2 of 2 CPUs held by 2 actors of `s0`"
    )
    assert not wait.by_others


def test_an_actor_waits_for_a_gpu_that_other_work_holds():
    found = pools(chain({"actors": (1, 1), "gpus": 1}))
    key = found[0].step.step_id
    seen = sample(
        found,
        actors={key: 0},
        total={"CPU": 4.0, "GPU": 4.0},
        free={"CPU": 3.0, "GPU": 0.0},
        pending=[{"GPU": 1.0}],
    )
    wait = decide(found, seen)
    assert wait is not None and wait.by_others
    assert wait.line() == (
        "waiting for 1 GPU (1 actor of `s0`): 4 of 4 GPUs held by other work on the cluster"
    )


def test_held_by_the_actions_actors_and_by_other_work():
    found = pools(chain({"actors": (1, 1)}, {"actors": (1, 1)}))
    top, below = (p.step.step_id for p in found)  # s1 over s0
    wait = decide(found, sample(found, actors={below: 1, top: 0}, total={"CPU": 3.0}))
    assert wait is not None
    assert wait.line() == (
        "waiting for 1 CPU (1 actor of `s1`): 3 of 3 CPUs held: 1 by 1 actor of `s0`, "
        "2 by other work on the cluster"
    )


@pytest.mark.parametrize(
    "given",
    [
        {"working": True},  # an actor runs a batch, or loads its model
        {"pulling": False},  # the driver is in the user's code: nobody waits on Ray
        {"pending": []},  # nothing asks for what the cluster lacks
        {"pending": [{"CPU": 1.0, "GPU": 1.0}]},  # only requests shaped as nobody's here
        {"free": {"CPU": 1.0}},  # there is room: Ray is about to place it
        {"pending": None},  # the cluster does not say, and every actor is up
    ],
)
def test_no_wait(given):
    found = pools(chain({"actors": (2, 2)}))
    assert decide(found, sample(found, **given)) is None


def test_when_the_cluster_does_not_say_an_actor_that_finds_no_room_waits():
    found = pools(chain({"actors": (2, 2)}))
    key = found[0].step.step_id
    wait = decide(found, sample(found, actors={key: 1}, pending=None))
    assert wait is not None and wait.waiting == "1 actor of `s0`"


def test_a_wait_is_shown_after_a_few_seconds_and_fails_at_the_timeout():
    found = pools(chain({"actors": (2, 2)}))
    watch = ResourceWatch(found, timeout_s=60)
    stalled = sample(found)
    assert watch.observe(stalled, now=100.0) is None  # just begun: scheduling, not a state
    assert watch.observe(stalled, now=100.0 + NOTICE_S - 0.1) is None
    shown = watch.observe(stalled, now=100.0 + NOTICE_S)
    assert shown is not None and shown.line().startswith("waiting for 1 CPU")
    assert watch.failure is None
    # Anything that moves starts the wait over
    assert watch.observe(sample(found, moved=1), now=150.0) is None
    assert watch.observe(sample(found, moved=1), now=209.9) is not None
    assert watch.failure is None
    watch.observe(sample(found, moved=1), now=210.0)
    assert isinstance(watch.failure, ResourceWaitError)
    assert str(watch.failure) == (
        "the Ray action waited 60 s, with nothing moving, for 1 CPU for a read, SQL or write "
        "task: 2 of 2 CPUs held by 2 actors of `s0`. The pipeline's own actors hold what it "
        "needs: lower a step's concurrency, cpus or gpus, or add nodes; or wait longer with "
        "vane.configure(resource_wait_timeout_s=...) (math.inf: as long as it takes)"
    )


def test_a_timeout_shorter_than_the_notice_shows_the_wait_when_it_fails():
    found = pools(chain({"actors": (2, 2)}))
    watch = ResourceWatch(found, timeout_s=1)
    watch.observe(sample(found), now=0.0)
    assert watch.observe(sample(found), now=1.0) is not None
    assert watch.failure is not None


def test_a_wait_that_ends_is_no_longer_shown():
    found = pools(chain({"actors": (2, 2)}))
    watch = ResourceWatch(found, timeout_s=60)
    watch.observe(sample(found), now=0.0)
    assert watch.observe(sample(found), now=10.0) is not None
    assert watch.observe(sample(found, working=True), now=11.0) is None
    assert watch.observe(sample(found), now=12.0) is None  # a new wait: its clock starts over
    assert watch.failure is None


def test_an_action_pulls_while_any_of_its_threads_waits_on_ray():
    watch = ResourceWatch([], timeout_s=60)
    assert not watch.is_pulling
    with watch.pulling():
        with watch.pulling():
            assert watch.is_pulling
        assert watch.is_pulling
    assert not watch.is_pulling


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5", True])
def test_the_timeout_is_a_positive_number_of_seconds(bad):
    with pytest.raises(ConfigurationError, match="resource_wait_timeout_s must be a positive"):
        vane.configure(resource_wait_timeout_s=bad)


def test_the_timeout_can_be_forever():
    try:
        assert vane.configure(resource_wait_timeout_s=math.inf).resource_wait_timeout_s == math.inf
        assert vane.configure(resource_wait_timeout_s=5).resource_wait_timeout_s == 5.0
    finally:
        vane.configure(resource_wait_timeout_s=Config().resource_wait_timeout_s)
