"""Which devices each actor's process may see (``warm.share_devices``): an actor holds one GPU
share, 0 .. ``max_actors`` - 1, and its share names a part of the visible devices."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vane.execution.actors.warm import share_devices, worker_env
from vane.execution.resources import gpus_needed
from vane.udf.spec import UdfSpec


def _identity(table: object) -> object:
    return table


def _spec(gpus: float, actors: int) -> UdfSpec:
    return UdfSpec(_identity, "map_batches", gpus=gpus, min_actors=actors, max_actors=actors)


@given(per_actor=st.integers(1, 4), actors=st.integers(1, 8))
def test_whole_gpus_give_each_share_its_own_devices(per_actor, actors):
    visible = [str(n) for n in range(gpus_needed(actors, per_actor))]
    spec = _spec(per_actor, actors)
    shares = [share_devices(spec, visible, share) for share in range(actors)]
    assert all(len(devices) == per_actor for devices in shares)
    assert sorted(d for devices in shares for d in devices) == sorted(visible)


@given(per_device=st.integers(1, 8), actors=st.integers(1, 16))
def test_a_fraction_of_a_gpu_shares_one_device_with_its_neighbours(per_device, actors):
    visible = [f"GPU-{n}" for n in range(gpus_needed(actors, 1 / per_device))]
    spec = _spec(1 / per_device, actors)
    for share in range(actors):
        # Shares 0 .. per_device - 1 see the first device, the next ones the second, ...
        assert share_devices(spec, visible, share) == [visible[share // per_device]]


def test_the_worker_of_a_share_sees_only_its_devices():
    spec = _spec(2, 2)
    env = worker_env(spec, ["4", "5", "6", "7"], 1)
    assert env["CUDA_VISIBLE_DEVICES"] == "6,7"


@given(
    gpus=st.floats(0.01, 0.99, allow_nan=False),
    actors=st.integers(1, 16),
)
def test_any_fraction_keeps_each_share_on_one_device_within_its_capacity(gpus, actors):
    # Before: gpus=0.3 gave share 3 the devices 0 and 1 (its 0.9-1.2 of the first two).
    visible = [str(n) for n in range(gpus_needed(actors, gpus))]
    spec = _spec(gpus, actors)
    on: dict[str, int] = {}
    for share in range(actors):
        [device] = share_devices(spec, visible, share)
        on[device] = on.get(device, 0) + 1
    assert all(count * gpus <= 1 + 1e-9 for count in on.values())


def test_more_than_one_gpu_per_actor_must_be_whole_devices():
    import vane
    from vane.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"gpus=1\.5.*whole devices.*gpus=2"):
        vane.range(3).map_batches(_identity, gpus=1.5)
