"""The recovery policy of actor pools (``vane.execution.actors.recovery``), on its own: what
becomes of a batch whose actor died or hung. The pool that carries the decisions out is tested
with real threads and processes in ``tests/integration/test_actor_faults.py``; here the policy
is followed, decision by decision, over batches holding rows that kill or hang any actor."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vane.errors import ActorDiedError, UDFError
from vane.execution.actors.recovery import (
    MAX_DEATHS_PER_BATCH,
    GiveUp,
    Loss,
    PoisonRow,
    Recovery,
    Retry,
    Split,
)
from vane.udf.runtime import Task
from vane.udf.spec import ERROR_COLUMN, UdfSpec

SCHEMA = pa.schema([("y", pa.int64()), (ERROR_COLUMN, pa.string())])


def _identity(table: pa.Table) -> pa.Table:
    return table


def _recovery(on_error: str = "raise", max_retries: int = 0) -> Recovery:
    spec = UdfSpec(
        _identity,
        "map_batches",
        on_error=on_error,  # type: ignore[arg-type]
        max_retries=max_retries,
        batch_timeout_s=1.0,
    )
    return Recovery(spec, SCHEMA, "map_batches step `s`")


def _task(rows: int, offset: int = 0, call_rows: int | None = None) -> Task:
    return Task(0, offset, pa.table({"x": list(range(offset, offset + rows))}), call_rows=call_rows)


def _loss(hung: bool, task: Task) -> Loss:
    if hung:
        return Loss(True, "the call did not finish", task.attempts_done, "f (udf.py:3)")
    return Loss(False, "the worker process (pid 7) was killed by SIGKILL")


@dataclass
class Run:
    """What following the policy to the end did to a batch: the rows it settled as poison, the
    actors it lost, and the error it gave up with."""

    poisoned: list[int] = field(default_factory=list)
    losses: int = 0
    error: BaseException | None = None


def _follow(recovery: Recovery, task: Task, poison: set[int], hung: bool, run: Run) -> None:
    """Run ``task`` as a pool would: a batch holding a poison row loses its actor every time,
    and the policy says what happens next; any other batch succeeds."""
    deaths = 0
    while poison & set(range(task.offset, task.offset + task.table.num_rows)):
        run.losses += 1
        decision = recovery.after_loss(task, deaths, _loss(hung, task))
        match decision:
            case Retry(task, deaths):  # the same batch, its retries or deaths counted
                continue
            case Split(tasks):
                # Consecutive pieces, covering the batch's rows exactly.
                assert tasks[0].offset == task.offset
                for piece, following in itertools.pairwise(tasks):
                    assert piece.offset + piece.table.num_rows == following.offset
                assert sum(piece.table.num_rows for piece in tasks) == task.table.num_rows
                for piece in tasks:
                    _follow(recovery, piece, poison, hung, run)
                return
            case GiveUp(error):
                run.error = error
                return
            case PoisonRow(outcome):
                assert task.table.num_rows == 1
                assert len(outcome.poisoned) == 1
                run.poisoned.append(task.offset)
                return


@given(rows=st.integers(1, 64), hung=st.booleans())
def test_a_lost_batch_under_raise_is_retried_then_fails_the_step(rows, hung):
    retries = 2
    recovery = _recovery("raise", max_retries=retries)
    task = _task(rows)
    run = Run()
    _follow(recovery, task, {0}, hung, run)
    # A death is retried MAX_DEATHS_PER_BATCH times, a hang max_retries times; then it fails.
    assert run.losses == (retries if hung else MAX_DEATHS_PER_BATCH) + 1
    assert run.poisoned == []
    if hung:
        assert isinstance(run.error, UDFError)
        assert isinstance(run.error.__cause__, TimeoutError)
        assert "after 3 attempts" in str(run.error)
    else:
        assert isinstance(run.error, ActorDiedError)
        assert f"input rows 0..{rows - 1}" in str(run.error)


@given(
    rows=st.integers(1, 200),
    data=st.data(),
    on_error=st.sampled_from(["skip", "null"]),
    hung=st.booleans(),
    max_retries=st.integers(0, 2),
)
def test_bisection_settles_exactly_the_poison_rows(rows, data, on_error, hung, max_retries):
    poison = data.draw(st.sets(st.integers(0, rows - 1), max_size=4))
    recovery = _recovery(on_error, max_retries=max_retries)
    run = Run()
    _follow(recovery, _task(rows), poison, hung, run)
    assert run.error is None
    assert sorted(run.poisoned) == sorted(poison)
    if len(poison) == 1 and not hung:
        # One poison row among n costs about log2(n) + 1 lost actors, plus one to find it.
        assert run.losses <= (rows - 1).bit_length() + 1


@pytest.mark.parametrize("on_error", ["raise", "skip", "null"])
def test_a_lost_unit_is_sent_again_as_its_calls_uncharged(on_error):
    recovery = _recovery(on_error)
    unit = _task(10, offset=20, call_rows=4)
    for hung in (False, True):
        decision = recovery.after_loss(unit, 0, _loss(hung, unit))
        assert isinstance(decision, Split)
        assert [(t.offset, t.table.num_rows) for t in decision.tasks] == [(20, 4), (24, 4), (28, 2)]
        assert all(t.attempts_done == unit.attempts_done for t in decision.tasks)


def test_a_single_poison_row_is_kept_as_nulls_with_its_error():
    recovery = _recovery("null")
    task = _task(1, offset=41)
    decision = recovery.after_loss(task, 0, _loss(False, task))
    assert isinstance(decision, PoisonRow)
    outcome = decision.outcome
    assert outcome.rows_nulled == 1
    assert outcome.table.column("y").to_pylist() == [None]
    assert outcome.table.column(ERROR_COLUMN).to_pylist()[0].startswith("ActorDiedError: ")
    assert outcome.poisoned == ["input row 41: the worker process (pid 7) was killed by SIGKILL"]
