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
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vane.execution.idle import IdleRegister


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


class ParkedHosts(IdleRegister[_Kept]):
    """The driver's kept hosts (see the module), each ended after ``worker_idle_timeout_s``
    unused (``IdleRegister``)."""

    def __init__(self) -> None:
        super().__init__("vane-ray-parked")
        self._ray: Any = None

    def park(self, ray: Any, key: HostKey, handle: Any) -> bool:
        """Keep ``handle`` for the next action whose step has ``key``; False when keeping is
        off (the caller ends the host)."""
        if self.timeout() <= 0:
            return False
        with self._lock:
            self._ray = ray
            self._add_locked(_Kept(key, handle, time.monotonic()))
        return True

    def take(self, key: HostKey) -> Any | None:
        """A kept host started as ``key`` says, the most recently kept first; None if none."""
        with self._lock:
            for kept in reversed(self._entries):
                if kept.key == key:
                    self._entries.remove(kept)
                    return kept.handle
        return None

    def keep_only(self, wanted: Mapping[HostKey, int]) -> None:
        """End every kept host that the steps of an action beginning now do not start with
        (``wanted``: how many hosts they start with, by key), so that none holds resources the
        action's own hosts need. Of those they take, the most recently kept stay."""
        left = dict(wanted)
        kept, ended = [], []
        with self._lock:
            for k in reversed(self._entries):
                if left.get(k.key, 0) > 0:
                    left[k.key] -= 1
                    kept.append(k)
                else:
                    ended.append(k)
            self._entries = kept[::-1]
        self._end(ended)

    def give_way(self, short: list[str]) -> None:
        """End every kept host that holds some of the ``short`` resources (``"CPU"``,
        ``"GPU"``, ``"memory"``): a step of a running action needs them to grow."""
        self._end(self._take_where(lambda k: any(k.key.holds(name) for name in short)))

    def clear(self) -> None:
        """End every kept host now."""
        self._end(self._take_where(lambda k: True))

    def count(self) -> int:
        with self._lock:
            return len(self._entries)

    def _idle_since(self, entry: _Kept) -> float:
        return entry.since

    def _end(self, entries: list[_Kept]) -> None:
        for k in entries:
            with contextlib.suppress(Exception):  # its cluster or the actor is gone already
                self._ray.kill(k.handle)


PARKED = ParkedHosts()
