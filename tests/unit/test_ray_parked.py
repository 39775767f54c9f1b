"""The driver's register of Ray hosts kept between actions (vane/execution/ray/parked.py), and
what a kept host does with a call its ended step had sent. On Ray in
tests/integration/test_ray_kept_hosts.py; here, the bookkeeping alone: a handle is any object,
and ending one is recorded instead of sent to a cluster."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

import vane
from vane.config import Config
from vane.execution.ray.hosts import RayHost
from vane.execution.ray.parked import HostKey, ParkedHosts


class _Cluster:
    """What the register asks of Ray: to kill an actor."""

    def __init__(self) -> None:
        self.killed: list[object] = []

    def kill(self, handle: object) -> None:
        self.killed.append(handle)


def _key(cpus: float) -> HostKey:
    return HostKey(("job", "node"), (("num_cpus", cpus),), 2, ())


@pytest.fixture
def keeping():
    vane.configure(worker_idle_timeout_s=600)
    yield
    vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)


def test_a_host_is_taken_by_its_own_shape_only_and_once(keeping):
    parked, cluster = ParkedHosts(), _Cluster()
    older, newer, other = object(), object(), object()
    for key, handle in ((_key(1), older), (_key(1), newer), (_key(2), other)):
        assert parked.park(cluster, key, handle)
    assert parked.take(_key(1)) is newer  # the most recently kept first
    assert parked.take(_key(1)) is older
    assert parked.take(_key(1)) is None
    assert parked.take(_key(2)) is other
    assert cluster.killed == []


def test_an_action_ends_the_hosts_its_steps_cannot_take(keeping):
    parked, cluster = ParkedHosts(), _Cluster()
    a1, a2, a3, b = object(), object(), object(), object()
    for key, handle in ((_key(1), a1), (_key(1), a2), (_key(1), a3), (_key(2), b)):
        parked.park(cluster, key, handle)
    # A step of shape 1 that starts with two hosts: the two kept last stay
    parked.keep_only({_key(1): 2})
    assert {id(h) for h in cluster.killed} == {id(a1), id(b)}
    assert parked.count() == 2
    assert {id(parked.take(_key(1))), id(parked.take(_key(1)))} == {id(a2), id(a3)}


def test_nothing_is_kept_with_keeping_off():
    vane.configure(worker_idle_timeout_s=0)
    try:
        assert not ParkedHosts().park(_Cluster(), _key(1), object())
    finally:
        vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)


def test_a_kept_host_is_ended_after_the_idle_timeout():
    parked, cluster = ParkedHosts(), _Cluster()
    handle = object()
    vane.configure(worker_idle_timeout_s=0.05)
    try:
        parked.park(cluster, _key(1), handle)
        guard = time.monotonic() + 60  # (waits for the end, whenever it comes)
        while not cluster.killed:
            assert time.monotonic() < guard, "the kept host was never ended"
            time.sleep(0.01)
    finally:
        vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)
    assert cluster.killed == [handle]
    assert parked.take(_key(1)) is None


def test_a_call_its_ended_step_had_sent_is_dropped_not_run():
    # A kept host may get, after its step's end, a call that step sent before it ended: it
    # must neither construct that step's UDF again (the holder is never read) nor answer it
    host = RayHost()
    host._ended.append("an ended step")
    answer, rows = host.call(
        "an ended step", ["never read"], [(0, 0, 3)], pa.table({"x": [1, 2, 3]})
    )
    assert rows == 0 and answer.num_rows == 0
    assert host._token is None


def test_a_step_that_would_grow_ends_the_kept_hosts_holding_what_it_lacks(keeping):
    # Hosts an earlier step of the same action kept, holding GPUs and CPUs: a step that finds
    # no GPU free ends those holding GPUs, and only those
    parked, cluster = ParkedHosts(), _Cluster()
    gpus = HostKey(("job", "node"), (("num_cpus", 0), ("num_gpus", 1)), 2, ())
    on_gpu, on_cpu = object(), object()
    parked.park(cluster, gpus, on_gpu)
    parked.park(cluster, _key(1), on_cpu)
    parked.give_way(["GPU"])
    assert cluster.killed == [on_gpu]
    parked.give_way(["memory"])  # (held by neither)
    assert cluster.killed == [on_gpu] and parked.count() == 1
    parked.give_way(["CPU", "GPU"])
    assert cluster.killed == [on_gpu, on_cpu] and parked.count() == 0


def test_a_shorter_timeout_ends_the_hosts_kept_longer_at_once(keeping):
    # Kept for up to 600 s; a configure that sets 0.5 ends it now, not at the old deadline
    parked, cluster = ParkedHosts(), _Cluster()
    handle = object()
    parked.park(cluster, _key(1), handle)
    while not parked._changed._waiters:  # type: ignore[attr-defined]  # its reaper waits
        time.sleep(0.001)
    vane.configure(worker_idle_timeout_s=0.5)
    guard = time.monotonic() + 60  # (far short of 600 s: the end the old timeout gave it)
    while not cluster.killed:
        assert time.monotonic() < guard, "the kept host waited for its old deadline"
        time.sleep(0.01)
    assert cluster.killed == [handle]


def test_a_step_closed_on_a_host_that_never_opened_for_it_stays_ended():
    # Ray restarted the host (its node lost) while the step ended early: the close, sent
    # again, may come before any call of the step has opened it. A call of that step that
    # comes after must not open it again (the host may be kept, or serve the next action)
    host = RayHost()
    host.close("an early-ended step", early=True)
    answer, rows = host.call(
        "an early-ended step", ["never read"], [(0, 0, 3)], pa.table({"x": [1, 2, 3]})
    )
    assert rows == 0 and answer.num_rows == 0
    assert host._token is None
