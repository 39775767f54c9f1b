"""The tally of a Ray action's UDF steps (``vane.execution.ray.tally.Tally``), plain classes
that run in a Ray actor of the driver's (``Tallies``): what the progress line shows on Ray is
what it decides."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vane.execution.accounting import StepCounts
from vane.execution.ray.tally import ActionEnded, Tallies, Tally, TallyRef
from vane.observe.events import ServerCount
from vane.udf.runtime import RowError
from vane.udf.spec import Budget


def test_the_tally_counts_an_actor_busy_once_whatever_its_calls():
    # What the progress line shows on Ray, decided by the tally: an actor is busy while any
    # call of its own runs, and two actors are two.
    tally = Tally()
    counts = StepCounts(rows_in=5, rows_out=5)
    tally.starting(1, "a")
    tally.joined(1, "a")
    tally.begin(1, "a")
    tally.begin(1, "a")  # its second call, queued in its worker
    assert (tally.totals()[1].busy, tally.totals()[1].actors) == (1, 1)
    tally.starting(1, "b")
    tally.joined(1, "b")
    tally.begin(1, "b")
    assert (tally.totals()[1].busy, tally.totals()[1].actors) == (2, 2)
    tally.done(1, "a", counts)
    assert tally.totals()[1].busy == 2  # "a" still runs a call
    tally.done(1, "a", counts)
    assert tally.totals()[1].busy == 1
    tally.left(1, "b")  # let go of while a call ran
    assert (tally.totals()[1].busy, tally.totals()[1].actors) == (0, 1)
    assert tally.totals()[1].counts.rows_in == 10 and tally.totals()[1].counts.rows_out == 10


def test_a_step_takes_its_time_from_its_first_actors_start_to_its_last_answer():
    # By the tally's clock (given here): an actor's leaving is Ray Data's affair and may come
    # while a later step runs, so it is no part of the step's time.
    now = iter([10.0, 12.0, 13.0, 15.0, 100.0])
    tally = Tally(clock=lambda: next(now))
    tally.starting(1, "a")  # 10: its first actor starts (its model loads)
    tally.joined(1, "a")  # 12
    tally.begin(1, "a")  # 13
    tally.done(1, "a", StepCounts(rows_in=5, rows_out=5))  # 15
    assert tally.totals()[1].counts.seconds == 5.0
    tally.left(1, "a")
    assert tally.totals()[1].counts.seconds == 5.0
    assert Tally().totals().get(2) is None  # a step that never started says nothing


def test_the_tally_sums_each_servers_requests_over_a_steps_actors():
    # Each actor says its counts as they stand (not what changed): the latest replaces the
    # last, and an actor that leaves has nothing in flight any more, though what it sent stays.
    tally = Tally()
    a, b = "http://10.0.0.1:8000/v1 (node 1a2b3c4d)", "http://10.0.0.2:8000/v1 (node 5e6f7a8b)"
    tally.requests(1, "x", (ServerCount(a, 4, 4),))
    tally.requests(1, "y", (ServerCount(a, 1, 1), ServerCount(b, 2, 3, 1)))
    tally.requests(2, "z", (ServerCount(a, 7, 7),))  # another step's: not this one's
    tally.requests(1, "x", (ServerCount(a, 2, 6),))
    assert tally.totals()[1].servers == (ServerCount(a, 3, 7), ServerCount(b, 2, 3, 1))
    tally.left(1, "y")
    assert tally.totals()[1].servers == (ServerCount(a, 2, 7), ServerCount(b, 0, 3, 1))
    assert tally.totals()[2].servers == (ServerCount(a, 7, 7),)


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=400),
    answers=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=12),
    in_flight=st.integers(min_value=1, max_value=3),
)
def test_a_budget_admits_calls_while_every_actors_answers_are_within_it(budget, answers, in_flight):
    # Actors' calls, `in_flight` at a time, each admitted by the tally before it is sent and
    # answered with its tokens: a call is admitted exactly while the step's usage so far
    # (every answered call's, from any actor) is within the budget, and the calls admitted
    # are counted until they end, so a refused call can wait for them.
    tally = Tally()
    limit = Budget(max_total_tokens=budget)
    spent = 0
    pending = list(answers)
    running: list[tuple[int, int]] = []
    while pending or running:
        while pending and len(running) < in_flight:
            call = pending.pop(0)
            admitted = tally.admit(1, limit)
            assert admitted == (spent <= budget)
            if not admitted:
                pending.clear()  # the job stops sending
                break
            running.append(call)
        assert tally.admitted(1) == len(running)
        if running:
            prompt, completion = running.pop(0)
            usage = {"prompt_tokens": prompt, "completion_tokens": completion}
            tally.done(1, "a", StepCounts(rows_in=5, rows_out=5, usage=usage))
            tally.release(1)
            spent += prompt + completion
    assert tally.admitted(1) == 0


def test_the_tally_keeps_each_batchs_failed_rows_and_the_rows_resumed():
    tally = Tally()
    rows = pa.table({"id": [3, 7]})
    errors = [RowError(0, "ValueError: bad 3", 4), RowError(1, "ValueError: bad 7", 2)]
    failing = StepCounts(rows_in=8, rows_out=6, skipped=2, first_error="ValueError: bad 3")
    tally.done(1, "a", failing, failed=(rows, errors))
    tally.done(1, "a", StepCounts(rows_in=8, rows_out=8, resumed=8))
    assert tally.failed_rows() == {1: [(rows, errors)]}
    assert tally.totals()[1].counts.resumed == 8 and tally.totals()[1].counts.rows_in == 16


class _Handle:
    """Stands in for the Ray actor handle that a ``TallyRef`` carries (the real one is used
    on Ray in tests/integration/test_ray_actions.py)."""

    def __init__(self) -> None:
        self.tallies = Tallies()
        self.call = SimpleNamespace(remote=self.tallies.call)
        self.close = SimpleNamespace(remote=self.tallies.close)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_drivers_tallies_keep_each_action_apart_and_only_those_under_way(data):
    # One actor per driver holds every action's tally (tally.py). The driver opens actions in
    # the order it numbers them and closes each at its end; an action's actors call any time,
    # before its open reaches the tally (their calls and the driver's are not ordered), or after
    # its close (Ray Data lets go of them late). An action's counts are its own; an ended one is
    # forgotten, what its actors say goes nowhere, and what they ask raises ActionEnded.
    tallies = Tallies()
    actions = 4
    opened = closed = 0  # actions 0 .. opened-1 are opened, 0 .. closed-1 of them closed
    rows = [0] * actions
    for _ in range(data.draw(st.integers(0, 30))):
        moves = (
            ["call"]
            + (["open"] if opened < actions else [])
            + (["close"] if closed < opened else [])
        )
        move = data.draw(st.sampled_from(moves))
        if move == "open":
            tallies.open(opened)
            opened += 1
        elif move == "close":  # (in order here; any order in a driver with several threads)
            tallies.close(closed)
            closed += 1
        else:
            action = data.draw(st.integers(0, actions - 1))
            n = data.draw(st.integers(1, 9))
            tallies.call(action, "done", 7, "a", StepCounts(rows_in=n, rows_out=n))
            if action >= closed:
                rows[action] += n
    under_way = [a for a in range(actions) if a >= closed and (a < opened or rows[a])]
    assert tallies.open_actions() == under_way
    for action in range(actions):
        if action < closed:
            with pytest.raises(ActionEnded):
                tallies.call(action, "totals")
            with pytest.raises(ActionEnded):
                tallies.call(action, "admit", 7, Budget(max_total_tokens=1))
            assert tallies.call(action, "left", 7, "a") is None
        elif action in under_way:
            totals = tallies.call(action, "totals")
            assert (totals[7].counts.rows_in if 7 in totals else 0) == rows[action]


def test_an_actions_tally_reference_names_its_action_and_travels_as_itself():
    # What an action's actors are given: pickled to them by Ray, called as an actor handle.
    ref = pickle.loads(pickle.dumps(TallyRef(_Handle(), 3)))
    tallies = ref.tallies.tallies  # (the stand-in travels as a copy; Ray's handle as itself)
    ref.starting.remote(1, "a")
    assert ref.totals.remote()[1].starting == 1
    assert tallies.open_actions() == [3]
    ref.close()
    assert tallies.open_actions() == []
    with pytest.raises(AttributeError):
        ref.no_such_method  # noqa: B018 - the lookup is what is tested


class _Ray:
    """The calls ``action_tally`` makes of Ray, answered in this process: each "actor" is a real
    ``Tallies``. It stands in for Ray because the case it tests, a driver that reconnects to a
    cluster restarted on the same port (the same GCS address and job id: checked by hand with
    ``ray start --port``), cannot be made beside the session's cluster without stopping it."""

    class _Refused(Exception):  # what Ray raises for an actor of a cluster it is not on
        pass

    def __init__(self) -> None:
        self.worker = "driver-1"
        self.actors: list[Tallies] = []
        self.gone: set[int] = set()  # the actors that no longer answer

    def get_runtime_context(self) -> SimpleNamespace:
        return SimpleNamespace(
            gcs_address="10.0.0.1:6379",
            get_job_id=lambda: "01000000",
            get_worker_id=lambda: self.worker,
            get_node_id=lambda: "a" * 56,
        )

    def remote(self, **options: object):
        def started(cls: type) -> SimpleNamespace:
            def make() -> SimpleNamespace:
                index = len(self.actors)
                self.actors.append(cls())

                def call(*args: object) -> object:
                    if index in self.gone:
                        return self._Refused(f"actor {index} is gone")
                    return self.actors[index].open(*args)

                return SimpleNamespace(open=SimpleNamespace(remote=call), index=index)

            return SimpleNamespace(remote=make)

        return started

    def get(self, answer: object) -> object:
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_an_action_finds_the_drivers_tallies_until_they_stop_answering_or_it_reconnects(
    monkeypatch,
):
    from vane.execution.ray import tally

    monkeypatch.setattr(tally, "_driver_tallies", {})
    ray = _Ray()
    first, second = tally.action_tally(ray), tally.action_tally(ray)
    assert first.tallies is second.tallies and len(ray.actors) == 1
    assert ray.actors[0].open_actions() == [first.action, second.action]
    ray.gone.add(0)  # killed, or left on a cluster that was stopped: not a RayActorError
    third = tally.action_tally(ray)
    assert third.tallies.index == 1 and ray.actors[1].open_actions() == [third.action]
    ray.worker = "driver-2"  # the driver disconnected and connected again: same address, job
    fourth = tally.action_tally(ray)
    assert fourth.tallies.index == 2 and ray.actors[2].open_actions() == [fourth.action]
    assert tally._driver_tallies == {("10.0.0.1:6379", "01000000", "driver-2"): fourth.tallies}
