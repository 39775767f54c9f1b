"""The tally of a Ray action's UDF steps (``vane.execution.ray.actor.Tally``), a plain class
that runs as a Ray actor: what the progress line shows on Ray is what it decides."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from vane.execution.accounting import StepCounts
from vane.execution.ray.actor import Tally
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
