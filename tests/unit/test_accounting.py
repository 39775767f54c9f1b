"""A step's counts (``vane.execution.accounting.StepCounts``): added batch by batch by the local
stage, and by the Ray tally in whatever order its actors answer; what a step says is built from
them alone."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from vane.execution.accounting import StepCounts
from vane.udf.runtime import BatchOutcome

_batches = st.lists(
    st.builds(
        StepCounts,
        rows_in=st.integers(0, 50),
        rows_out=st.integers(0, 50),
        skipped=st.integers(0, 5),
        nulled=st.integers(0, 5),
        resumed=st.integers(0, 50),
        first_error=st.one_of(st.none(), st.just("ValueError: bad row")),
        usage=st.dictionaries(st.sampled_from(["requests", "prompt_tokens"]), st.integers(0, 9)),
        busy=st.integers(0, 40).map(lambda n: n / 4),  # quarters add up exactly in any order
    ),
    max_size=10,
)


def _added(batches: list[StepCounts]) -> StepCounts:
    total = StepCounts()
    for batch in batches:
        total.add(batch)
    return total


@settings(max_examples=80, deadline=None)
@given(batches=_batches, seed=st.integers(0, 2**16))
def test_a_steps_counts_do_not_depend_on_the_order_its_batches_answer(batches, seed):
    # Ray's actors answer in any order, and the tally adds their batches as they come; two
    # parts of a step added together are the step's counts too.
    shuffled = list(batches)
    random.Random(seed).shuffle(shuffled)
    in_order, out_of_order = _added(batches), _added(shuffled)
    assert in_order == out_of_order
    half = len(batches) // 2
    parts = _added(batches[:half])
    parts.add(_added(batches[half:]))
    assert parts == in_order
    assert in_order.rows_in == sum(b.rows_in for b in batches)
    assert sum(in_order.usage.values()) == sum(sum(b.usage.values()) for b in batches)
    assert in_order.busy == sum(b.busy for b in batches)


@settings(max_examples=80, deadline=None)
@given(before=_batches, after=_batches)
def test_what_moved_since_a_poll_is_what_was_added_after_it(before, after):
    # The Ray driver's progress events: the counts now, less the counts at the last poll.
    then = _added(before)
    now = _added(before + after)
    moved, added = now.since(then), _added(after)
    assert (moved.rows_in, moved.rows_out, moved.resumed) == (
        added.rows_in,
        added.rows_out,
        added.resumed,
    )
    assert moved.usage == {k: v for k, v in added.usage.items() if v}


def test_a_batchs_counts_come_from_its_outcome_and_its_time_from_its_stamps():
    outcome = BatchOutcome(
        pa.table({"x": [1, 2]}),
        rows_skipped=1,
        first_error="ValueError: bad",
        poisoned=["input row 2: killed its actor"],
        usage={"requests": 3},
        seconds=1.25,
    )
    batch = StepCounts.of_batch(3, outcome, resumed=0)
    assert (batch.rows_in, batch.rows_out, batch.skipped, batch.usage) == (3, 2, 1, {"requests": 3})
    step = StepCounts()
    step.stamp(10.0)
    step.add(batch)
    step.stamp(12.5)
    summary = step.finished("score", 7)
    assert summary.summary() == (
        "3 rows in, 2 out, 1 skipped, 2.50 s (1.25 s in the function); 3 requests"
    )
    assert summary.busy_seconds == 1.25
    assert batch.progress("score", 7, busy=1, actors=2).rows_out == 2
    # a batch a resumable write answered from saved work took the function no time
    assert StepCounts.of_batch(3, outcome, resumed=3).busy == 0.0
