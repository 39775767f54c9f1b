"""Events and summaries: a subscriber watches the work and never takes part in it (one that
raises is logged once and the job goes on; one thread at a time calls it), and each UDF step is
known by its identity, so two steps of one function never report each other's numbers."""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pytest

import vane
from vane.observe.events import BatchDone, StageFinished, StageStarted, subscribe

BACKENDS = ["thread", "subprocess_actor"]


def double(batch: pa.Table) -> dict[str, object]:
    import pyarrow.compute as pc

    return {"id": batch["id"], "v": pc.multiply(batch["id"], 2)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_subscriber_that_raises_is_logged_once_and_the_job_goes_on(tmp_path, caplog, backend):
    heard: list[object] = []

    def broken(event: object) -> None:
        raise RuntimeError("metrics backend is down")

    stop_broken = subscribe(broken)
    stop_heard = subscribe(heard.append)
    try:
        with caplog.at_level(logging.WARNING, logger="vane"):
            result = (
                vane.range(40)
                .map_batches(
                    double,
                    schema={"id": "BIGINT", "v": "BIGINT"},
                    batch_size=8,
                    execution_backend=backend,
                )
                .write_parquet(str(tmp_path / "out"))
            )
    finally:
        stop_broken()
        stop_heard()
    assert result.rows == 40 and vane.read_parquet(str(tmp_path / "out")).count() == 40
    # the others heard every event, the broken one's failure was said once
    assert sum(e.rows_in for e in heard if isinstance(e, BatchDone)) == 40
    assert [type(e) for e in heard if not isinstance(e, BatchDone)] == [
        StageStarted,
        StageFinished,
    ]
    said = [r for r in caplog.records if "metrics backend is down" in (r.exc_text or "")]
    assert len(said) == 1 and "raised on StageStarted" in said[0].getMessage()


def test_a_subscriber_is_called_by_one_thread_at_a_time():
    # Two actions on two threads emit at once. The first call waits (a while, at most) for a
    # second call to come in beside it: it never does while calls are serialized, and the test
    # then only took longer; without serialization it comes at once.
    inside = 0
    most = 0
    entered = threading.Condition()

    def subscriber(event: object) -> None:
        nonlocal inside, most
        with entered:
            inside += 1
            most = max(most, inside)
            entered.notify_all()
            if most == 1 and isinstance(event, StageStarted):
                entered.wait_for(lambda: inside > 1, timeout=2)
            inside -= 1

    unsubscribe = subscribe(subscriber)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            vane.range(20).map_batches(double, schema={"id": "BIGINT", "v": "BIGINT"}).count()
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        unsubscribe()
    assert not errors
    assert most == 1


class Counted:
    """Counts the rows it saw, as a UDF class reports counters (``usage_counters``)."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.rows += batch.num_rows
        return batch

    def usage_counters(self) -> dict[str, int]:
        return {"rows_seen": self.rows}


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def runner(request):
    if request.param == "ray":
        request.getfixturevalue("on_ray")
    return request.param


@pytest.mark.timeout(300)
def test_two_steps_of_one_function_report_their_own_numbers(tmp_path, runner):
    # The same class twice, the second step over a third of the rows: every report keeps them
    # apart (events, the write's summaries and usage, explain(analyze=True)).
    schema = {"id": "BIGINT"}
    rel = (
        vane.range(30)
        .map_batches(Counted, schema=schema, batch_size=7)
        .filter("id < 10")
        .map_batches(Counted, schema=schema, batch_size=7)
    )
    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        result = rel.write_parquet(str(tmp_path / "out"))
        plan = rel.explain(analyze=True)
    finally:
        unsubscribe()
    assert result.rows == 10
    steps = {s.step_id: (s.step, s.rows_in, s.rows_out) for s in result.steps}
    assert sorted(steps.values()) == [("Counted", 10, 10), ("Counted", 30, 30)]
    assert sorted(result.usage) == ["Counted", "Counted #2"]
    assert sorted(u["rows_seen"] for u in result.usage.values()) == [10, 30]

    first_run = [e for e in seen if isinstance(e, StageFinished)][:2]
    assert {e.step_id for e in first_run} == set(steps)
    rows_by_step: dict[int, int] = {}
    for event in seen[: seen.index(first_run[-1]) + 1]:
        if isinstance(event, BatchDone):
            rows_by_step[event.step_id] = rows_by_step.get(event.step_id, 0) + event.rows_in
    assert rows_by_step == {key: rows_in for key, (_, rows_in, _) in steps.items()}

    top, bottom = [line for line in plan.splitlines() if "MapBatches Counted" in line]
    assert "-- 10 rows in, 10 out" in top and "10 rows seen" in top
    assert "-- 30 rows in, 30 out" in bottom and "30 rows seen" in bottom
