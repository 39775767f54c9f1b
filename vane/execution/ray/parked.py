"""Hosts kept between actions on Ray: a UDF step's actors, once their action has ended, wait
here for the next action's step of the same shape, for ``worker_idle_timeout_s``.

A host's start is most of a warm Ray action: Ray starts the actor's process, the host starts
its worker process, and that worker imports the UDF's libraries (torch and its model library:
seconds) before the UDF is constructed. Actions that follow each other, a loop over files in a
script or a notebook's cells, pay it every time, as Ray Data's do (it builds a new actor pool
for each execution). So a step that ended gracefully, every batch answered and the UDF's
``teardown()`` run, leaves its hosts here instead of killing them, each with its worker process
(kept by the warm pool of the host's own process, ``actors/warm.py``). The next action's step
whose hosts would be started the same way (``HostKey``: the cluster, the actor's resources and
placement, its concurrency, its worker's environment) takes them: the UDF is constructed anew
in the same worker (``RayHost.open``), without the imports. As locally, only the processes are
reused, never a UDF instance.

What a kept host holds: its CPUs, GPUs and memory stay reserved in the cluster while it waits.
An action that begins ends at once every kept host that its steps do not start with
(``keep_only``: each step takes as many as its minimum of hosts, the shape its resources were
checked for, ``fit.py``), so that none holds what its steps need. A step grows past its minimum
as before, onto room the cluster has; kept hosts that hold what it lacks are ended when it looks
(``give_way``: an earlier step of the same action, ended already, keeps its hosts for the next
action). Should something of an action's still find no room while hosts are kept (kept by
another action of the driver's, running beside it), they are ended then (the runner's resource
watch, after a second of it). Other drivers on the same cluster wait at most the timeout for
them; a ``configure`` that shortens it applies at once. 0 turns keeping off: hosts end with
their step, as before. A failed or stopped step's hosts are killed, never kept."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vane.config import get_config, watch_idle_timeout
from vane.execution.actors.warm import LONGEST_WAIT_S


@dataclass(frozen=True)
class HostKey:
    """How a step's hosts are started: two hosts with the same key are interchangeable
    between actions."""

    # The driver's connection to its cluster (its job, and the node it runs on: a new cluster
    # numbers its jobs afresh): a handle from another one is invalid.
    job: tuple[str, str]
    options: tuple[tuple[str, Any], ...]  # the actor's resources and placement
    calls: int  # its max_concurrency
    environment: tuple[tuple[str, str], ...]  # its worker's switches (model_bars.py)

    @classmethod
    def of(
        cls, ray: Any, options: Mapping[str, Any], calls: int, environment: Mapping[str, str]
    ) -> HostKey:
        context = ray.get_runtime_context()
        return cls(
            (context.get_job_id(), context.get_node_id()),
            tuple(sorted((name, _frozen(value)) for name, value in options.items())),
            calls,
            tuple(sorted(environment.items())),
        )

    def holds(self, resource: str) -> bool:
        """Whether its hosts reserve some of ``resource`` (as ``available_resources`` names
        it: ``"CPU"``, ``"GPU"``, ``"memory"``)."""
        option = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}.get(resource)
        amount = dict(self.options).get(option) if option is not None else None
        return isinstance(amount, int | float) and amount > 0


def _frozen(value: Any) -> Any:
    """A value comparable across actions: a scheduling strategy is a new object each time,
    equal to the last when its fields are."""
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    fields = getattr(value, "__dict__", None)
    if fields is None:
        return repr(value)
    return (type(value).__qualname__, tuple(sorted((k, repr(v)) for k, v in fields.items())))


@dataclass
class _Kept:
    key: HostKey
    handle: Any
    since: float


class ParkedHosts:
    """The driver's kept hosts (see the module); thread-safe: actions may run side by side."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._kept: list[_Kept] = []  # oldest first
        self._reaper: threading.Thread | None = None
        self._ray: Any = None
        watch_idle_timeout(self.wake)

    @staticmethod
    def timeout() -> float:
        return get_config().worker_idle_timeout_s

    def park(self, ray: Any, key: HostKey, handle: Any) -> bool:
        """Keep ``handle`` for the next action whose step has ``key``; False when keeping is
        off (the caller ends the host)."""
        if self.timeout() <= 0:
            return False
        with self._lock:
            self._ray = ray
            self._kept.append(_Kept(key, handle, time.monotonic()))
            if self._reaper is None:
                self._reaper = threading.Thread(
                    target=self._reap, daemon=True, name="vane-ray-parked"
                )
                self._reaper.start()
            self._changed.notify()
        return True

    def take(self, key: HostKey) -> Any | None:
        """A kept host started as ``key`` says, the most recently kept first; None if none."""
        with self._lock:
            for kept in reversed(self._kept):
                if kept.key == key:
                    self._kept.remove(kept)
                    return kept.handle
        return None

    def keep_only(self, wanted: Mapping[HostKey, int]) -> None:
        """End every kept host that the steps of an action beginning now do not start with
        (``wanted``: how many hosts they start with, by key), so that none holds resources the
        action's own hosts need. Of those they take, the most recently kept stay."""
        left = dict(wanted)
        kept, ended = [], []
        with self._lock:
            for k in reversed(self._kept):
                if left.get(k.key, 0) > 0:
                    left[k.key] -= 1
                    kept.append(k)
                else:
                    ended.append(k)
            self._kept = kept[::-1]
        self._kill(ended)

    def give_way(self, short: list[str]) -> None:
        """End every kept host that holds some of the ``short`` resources (``"CPU"``,
        ``"GPU"``, ``"memory"``): a step of a running action needs them to grow."""
        ended = []
        with self._lock:
            for k in list(self._kept):
                if any(k.key.holds(name) for name in short):
                    self._kept.remove(k)
                    ended.append(k)
        self._kill(ended)

    def wake(self) -> None:
        """Read the timeout again now (``configure`` changed it)."""
        with self._lock:
            self._changed.notify()

    def clear(self) -> None:
        """End every kept host now."""
        with self._lock:
            ended, self._kept = self._kept, []
        self._kill(ended)

    def count(self) -> int:
        with self._lock:
            return len(self._kept)

    def _reap(self) -> None:
        """End each host kept longer than the timeout (read whenever the registry changes and
        at each expiry, as the local warm pool does)."""
        while True:
            with self._lock:
                now = time.monotonic()
                timeout = self.timeout()
                expired = [k for k in self._kept if now - k.since >= timeout]
                self._kept = [k for k in self._kept if now - k.since < timeout]
                if not expired:
                    left = [k.since + timeout - now for k in self._kept]
                    self._changed.wait(min(*left, LONGEST_WAIT_S) if left else None)
                    continue
            self._kill(expired)

    def _kill(self, kept: list[_Kept]) -> None:
        for k in kept:
            with contextlib.suppress(Exception):  # its cluster or the actor is gone already
                self._ray.kill(k.handle)


PARKED = ParkedHosts()
