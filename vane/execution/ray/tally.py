"""The counts of a Ray action's UDF steps, kept on the driver's node.

Each action has a ``Tally``: its steps' actors tell it what they start, run and answer, and the
driver reads it for the progress line, the resource watch and the on_error warning. The tallies
of a driver's actions live in one Ray actor per driver (``Tallies``), started by its first
action and kept until the driver's Ray job ends: an actor of its own per action cost a process
in every action (1.9 s here to start and answer a first call, beside the step's own actors on
the same CPUs). An action's actors reach its tally through a ``TallyRef``, which names the
action and is called as the actor was (``ref.done.remote(...)``).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from vane.errors import VaneError
from vane.execution.accounting import StepCounts
from vane.observe.events import ServerCount, merge_servers
from vane.udf.runtime import RowError
from vane.udf.spec import Budget


class Tally:
    """One per action (kept in the driver's ``Tallies``): per UDF step, the actors starting
    and up, the actors busy, rows in and out, and rows that on_error skipped or nulled. The
    driver reads it for progress events and its resource watch while the action runs, and
    for the warning at its end.

    An actor's calls overlap (two at once, or an async UDF's many), so an actor is busy while
    any call of its own runs: the tally keeps each actor's running calls, by the actor's name.

    A step's seconds run from its first actor's start to its last answered batch (as a local
    stage's run from its pool's start to its end), by the tally's clock: each step its own
    time, as locally, rather than the action's. (An actor's leaving is not counted: its
    teardown is not the step's work.)
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.steps: dict[int, StepState] = {}
        self._calls: dict[tuple[int, str], int] = {}  # (step, actor) -> calls running
        # (step, actor) -> its requests per server, as it last said
        self._servers: dict[tuple[int, str], tuple[ServerCount, ...]] = {}
        self._clock = clock
        # A budgeted step's calls admitted and not yet answered (``admit``), by step.
        self._admitted: dict[int, int] = {}
        # A write's error ledger: per step, each batch's failed input rows and their errors.
        self.failed: dict[int, list[tuple[pa.Table, list[RowError]]]] = {}

    def _step(self, key: int) -> StepState:
        return self.steps.setdefault(key, StepState())

    def _stamp(self, key: int) -> None:
        self._step(key).counts.stamp(self._clock())

    def _running(self, key: int, actor: str, change: int) -> None:
        calls = self._calls.get((key, actor), 0)
        self._calls[(key, actor)] = calls + change
        self._step(key).busy += (calls + change > 0) - (calls > 0)

    def starting(self, key: int, actor: str) -> None:
        self._stamp(key)
        self._step(key).starting += 1

    def gave_up(self, key: int, actor: str) -> None:
        self._step(key).starting -= 1

    def joined(self, key: int, actor: str) -> None:
        self._stamp(key)
        counts = self._step(key)
        counts.starting -= 1
        counts.actors += 1

    def left(self, key: int, actor: str) -> None:
        self._step(key).actors -= 1
        if self._calls.pop((key, actor), 0) > 0:
            self._step(key).busy -= 1
        servers = self._servers.get((key, actor), ())
        if any(c.in_flight for c in servers):  # what it had in flight is gone with it
            self.requests(key, actor, tuple(replace(c, in_flight=0) for c in servers))

    def requests(self, key: int, actor: str, servers: tuple[ServerCount, ...]) -> None:
        """An actor's requests per server now (``vane.observe.requests``)."""
        self._servers[(key, actor)] = servers
        mine = [counts for (step, _), counts in self._servers.items() if step == key]
        self._step(key).servers = merge_servers(mine)

    def begin(self, key: int, actor: str) -> None:
        self._stamp(key)
        self._running(key, actor, +1)

    def admit(self, key: int, budget: Budget) -> bool:
        """Whether a batch of step ``key`` may be sent: its actors' usage so far is within
        ``budget``. The tally answers one call at a time, so an admitted call is counted
        before any later call is refused, and a refused one waits for it (``admitted``)."""
        if budget.exceeded(self._step(key).counts.usage):
            return False
        self._admitted[key] = self._admitted.get(key, 0) + 1
        return True

    def release(self, key: int) -> None:
        self._admitted[key] = self._admitted.get(key, 0) - 1

    def admitted(self, key: int) -> int:
        return self._admitted.get(key, 0)

    def done(
        self,
        key: int,
        actor: str,
        counts: StepCounts,
        *,
        failed: tuple[pa.Table, list[RowError]] | None = None,
    ) -> None:
        """A batch answered (a failed one: no counts), and for an error ledger its failed
        rows."""
        self._stamp(key)
        self._running(key, actor, -1)
        self._step(key).counts.add(counts)
        if failed is not None:
            self.failed.setdefault(key, []).append(failed)

    def failed_rows(self) -> dict[int, list[tuple[pa.Table, list[RowError]]]]:
        return self.failed

    def totals(self) -> dict[int, StepState]:
        return self.steps


@dataclass
class StepState:
    """A step of a Ray action as its tally sees it: its counts (as a local stage keeps them)
    and its actors."""

    counts: StepCounts = field(default_factory=StepCounts)
    actors: int = 0
    starting: int = 0  # constructing (their resources held, their worker not yet up)
    busy: int = 0
    servers: tuple[ServerCount, ...] = ()  # its actors' requests per server, summed


class ActionEnded(VaneError):
    """What an ended action's leftover actors are told when they ask its tally (a failed
    action kills its actors without waiting for them, and a kill takes a moment): a
    constructor does not go on to load its model, a batch is not admitted. Nobody waits for
    those actors any more."""


class Tallies:
    """The driver's tallies, by action (one Ray actor per driver, on its node). The driver
    opens each action (``open``, in the order it numbers them: a caller's calls to an actor
    arrive in order) and closes it at its end. An action's tally is made by the first call
    that names it, which may be one of its actors' (their calls and the driver's are not
    ordered among themselves): an action numbered above the last opened is yet to be opened,
    one at or below it and not here has ended. What an ended action's actors say goes
    nowhere; what they ask raises ``ActionEnded``, as the per-action tally's death did. So
    the actor holds only the actions under way.

    One actor holds every action of the driver: if it dies (the memory monitor), the actions
    under way fail with it, and the next action starts another (``action_tally``)."""

    def __init__(self) -> None:
        self._tallies: dict[int, Tally] = {}
        self._opened = -1  # the last action the driver opened

    def open(self, action: int) -> None:
        self._opened = max(self._opened, action)
        self._tallies.setdefault(action, Tally())

    def call(self, action: int, method: str, *args: Any, **kwargs: Any) -> Any:
        tally = self._tallies.get(action)
        if tally is None:
            if action <= self._opened:  # ended
                if method in _ASKED:
                    raise ActionEnded(
                        f"vane: the Ray action this actor served has ended ({method})"
                    )
                return None
            tally = self._tallies[action] = Tally()
        return getattr(tally, method)(*args, **kwargs)

    def close(self, action: int) -> None:
        self._tallies.pop(action, None)

    def open_actions(self) -> list[int]:
        return sorted(self._tallies)


# The methods of a ``Tally`` that an action's actors and its driver call; those whose answer
# the caller waits for (an ended action's leftover actor is stopped there).
_METHODS = frozenset(
    name for name in vars(Tally) if not name.startswith("_") and callable(vars(Tally)[name])
)
_ASKED = frozenset({"starting", "admit", "admitted", "totals", "failed_rows"})


class TallyRef:
    """One action's tally in the driver's ``Tallies``, called as an actor handle is:
    ``ref.done.remote(key, actor, counts)`` gives an object ref.

    It travels to the steps' actors by the ``Tallies`` actor's name, which each process looks
    up once: an actor handle among an actor's constructor arguments makes Ray log an error
    (its arguments "in the object store") for every actor that may be restarted, as a UDF
    step's are."""

    __slots__ = ("_tallies", "action", "name")

    def __init__(self, tallies: Any, action: int, name: str | None = None) -> None:
        self._tallies = tallies
        self.action = action
        self.name = name

    @property
    def tallies(self) -> Any:
        if self._tallies is None:
            assert self.name is not None
            self._tallies = _named(self.name)
        return self._tallies

    def __getattr__(self, name: str) -> _Method:
        if name not in _METHODS:  # (pickle looks for methods that are not there)
            raise AttributeError(name)
        return _Method(self, name)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.name is None:  # (an unnamed one travels with what it holds)
            return (TallyRef, (self._tallies, self.action))
        return (TallyRef, (None, self.action, self.name))

    def close(self) -> None:
        """End the action: what its leftover actors say goes nowhere (``Tallies``)."""
        self.tallies.close.remote(self.action)


@dataclass(frozen=True)
class _Method:
    ref: TallyRef
    name: str

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.ref.tallies.call.remote(self.ref.action, self.name, *args, **kwargs)


# The driver's ``Tallies`` actor, by its connection to Ray (a driver that shuts Ray down and
# connects again is another worker of maybe another cluster, whose job ids start afresh), and
# its actions' numbers.
_driver_tallies: dict[tuple[str, str, str], Any] = {}
_driver_names: dict[tuple[str, str, str], str] = {}  # each one's name, by which actors find it
_driver_lock = threading.Lock()
_actions = itertools.count()
# The ``Tallies`` actors this process has looked up by name.
_found: dict[str, Any] = {}


def _named(name: str) -> Any:
    found = _found.get(name)
    if found is None:
        import ray

        found = _found[name] = ray.get_actor(name)
    return found


def _forget_in_child() -> None:
    # A forked child is not connected to Ray as its parent is (Ray is not fork-safe); should it
    # connect, it starts tallies of its own, its lock free
    global _driver_lock
    _driver_lock = threading.Lock()
    _driver_tallies.clear()
    _found.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def action_tally(ray: Any) -> TallyRef:
    """A new action's tally, opened in this driver's ``Tallies`` (started by its first action,
    on the driver's node: if a worker node is lost, the counts must not be lost with it). One
    that no longer answers (killed by hand, by the memory monitor, or left on a cluster this
    driver disconnected from) is replaced."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    context = ray.get_runtime_context()
    try:
        worker = str(context.get_worker_id())
    except Exception:  # (a Ray client's context has none: its job id is its own)
        worker = ""
    connection = (str(context.gcs_address), str(context.get_job_id()), worker)
    with _driver_lock:
        action = next(_actions)
        tallies = _driver_tallies.get(connection)
        if tallies is not None:
            try:
                # Waited for: a started actor answers in a millisecond, and so is known alive
                # (the first action does not wait for the start)
                ray.get(tallies.open.remote(action))
            except Exception:  # dead, or of another cluster (not a RayActorError, then)
                tallies = None
        if tallies is None:
            _driver_tallies.clear()  # (a connection this driver left)
            here = NodeAffinitySchedulingStrategy(context.get_node_id(), soft=False)
            name = f"vane-tallies-{uuid.uuid4().hex}"
            tallies = ray.remote(num_cpus=0, scheduling_strategy=here, name=name)(Tallies).remote()
            tallies.open.remote(action)
            _driver_tallies[connection] = tallies
            _driver_names[connection] = name
    return TallyRef(tallies, action, _driver_names[connection])
