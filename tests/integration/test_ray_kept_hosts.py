"""A UDF step's hosts on Ray are kept between actions (vane/execution/ray/parked.py): the next
action's step of the same shape takes them, worker processes and their imports included, and
constructs its UDF anew in them; keeping never holds what another step needs, never outlives
``worker_idle_timeout_s``, and never follows a failure.

The session's cluster has 4 CPUs and 4 GPUs (logical).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from vane.config import Config
from vane.errors import UDFError
from vane.execution.ray.parked import PARKED

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SCHEMA = {"id": "BIGINT", "pid": "BIGINT"}
ROWS = 40


class Noted:
    """Notes each construction and teardown in ``folder``; answers each row with its worker
    process's pid, after ``pause`` seconds; fails on the row ``fail_at``. With ``together``,
    its constructor returns once that many instances have been constructed (in 120 s)."""

    def __init__(
        self, folder: str, fail_at: int = -1, pause: float = 0.0, together: int = 0
    ) -> None:
        self.folder = Path(folder)
        self.fail_at = fail_at
        self.pause = pause
        self.name = uuid.uuid4().hex
        (self.folder / f"{self.name}.born").touch()
        guard = time.monotonic() + 120
        while len(list(self.folder.glob("*.born"))) < together:
            if time.monotonic() > guard:
                raise TimeoutError(f"{together} instances were not constructed together")
            time.sleep(0.05)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.fail_at in batch["id"].to_pylist():
            raise ValueError(f"row {self.fail_at} fails")
        time.sleep(self.pause)
        pid = pa.array([os.getpid()] * batch.num_rows, pa.int64())
        return pa.table({"id": batch["id"], "pid": pid})

    def teardown(self) -> None:
        (self.folder / f"{self.name}.ended").touch()


@pytest.fixture
def keeping(on_ray) -> Iterator[object]:
    """Hosts kept for a minute (restored after): nothing in a test ends them by time."""
    vane.configure(worker_idle_timeout_s=60)
    yield on_ray
    vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)


def _step(folder: Path, **options: object) -> vane.Relation:
    fail_at = options.pop("fail_at", -1)
    pause = options.pop("pause", 0.0)
    together = options.pop("together", 0)
    return vane.range(ROWS).map_batches(
        Noted,
        schema=SCHEMA,
        batch_size=10,
        fn_constructor_args=(str(folder), fail_at, pause, together),
        **options,
    )


def _pids(folder: Path, **options: object) -> set[int]:
    rows = _step(folder, **options).to_pylist()
    assert [r["id"] for r in rows] == list(range(ROWS))
    return {r["pid"] for r in rows}


def _count(folder: Path, suffix: str) -> int:
    return len(list(folder.glob(f"*.{suffix}")))


def test_the_next_action_takes_the_hosts_the_last_one_kept(tmp_path, keeping):
    first = _pids(tmp_path)
    assert PARKED.count() == 1
    second = _pids(tmp_path)
    # The same worker process, not a new one: what it imported is imported ...
    assert second == first
    # ... but each action constructs its UDF anew, and runs its teardown at its end
    assert _count(tmp_path, "born") == 2
    assert _count(tmp_path, "ended") == 2


def test_a_step_ended_early_keeps_its_hosts(tmp_path, keeping):
    # The reader lets go after the first batch, with the batches after it sent to the host:
    # the host is kept all the same, and the next action's batches are its own (what a call
    # sent before the end does if it comes after: tests/unit/test_ray_parked.py)
    batches = _step(tmp_path, pause=0.5).iter_batches(10)
    first = next(batches)
    batches.close()
    assert first["id"].to_pylist() == list(range(10))
    assert PARKED.count() == 1
    assert _pids(tmp_path) == set(first["pid"].to_pylist())
    assert _count(tmp_path, "born") == _count(tmp_path, "ended") == 2


def test_with_keeping_off_every_action_starts_its_own_hosts(tmp_path, on_ray):
    vane.configure(worker_idle_timeout_s=0)
    try:
        first = _pids(tmp_path)
        assert PARKED.count() == 0
        assert _pids(tmp_path).isdisjoint(first)
    finally:
        vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)


def test_kept_hosts_end_after_the_idle_timeout(tmp_path, on_ray):
    vane.configure(worker_idle_timeout_s=1)
    try:
        (pid,) = _pids(tmp_path)
        guard = time.monotonic() + 120  # (what the test waits for is an end, not a time)
        while PARKED.count() or not _gone(pid):
            assert time.monotonic() < guard, "the kept host or its worker outlived the timeout"
            time.sleep(0.1)
    finally:
        vane.configure(worker_idle_timeout_s=Config().worker_idle_timeout_s)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie whose parent died has exited too)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_kept_host_does_not_hold_what_another_step_needs(tmp_path, keeping):
    # The first action's host holds every GPU of the cluster while it is kept; the next
    # action's step needs one GPU and cannot take that host (another shape): had it been left
    # holding them, this action would wait for resources, then fail
    vane.configure(worker_idle_timeout_s=600)  # (outlasts the wait below)
    _pids(tmp_path, gpus=4)
    assert PARKED.count() == 1
    vane.configure(resource_wait_timeout_s=30)
    try:
        assert len(_pids(tmp_path, gpus=1)) == 1
    finally:
        vane.configure(resource_wait_timeout_s=Config().resource_wait_timeout_s)
    assert PARKED.count() == 1  # the one-GPU step's host; the four-GPU one was ended


def test_a_failed_action_keeps_no_host(tmp_path, keeping):
    with pytest.raises(UDFError, match="row 25 fails"):
        _step(tmp_path, fail_at=25).to_pylist()
    assert PARKED.count() == 0
    assert _count(tmp_path, "ended") == 0  # (no teardown runs after a failure, as locally)
    assert len(_pids(tmp_path)) == 1


def test_a_failing_constructor_fails_a_kept_host_as_a_new_one(tmp_path, keeping):
    _pids(tmp_path)
    assert PARKED.count() == 1
    missing = tmp_path / "missing"  # the constructor's touch fails: no such folder
    with pytest.raises(UDFError, match="No such file or directory"):
        _pids(missing)
    assert PARKED.count() == 0


def test_a_kept_host_that_died_while_it_waited_is_replaced(tmp_path, keeping):
    (first,) = _pids(tmp_path)
    (kept,) = PARKED._entries  # (the register's own record: the test kills its actor)
    keeping.kill(kept.handle)  # as the kernel's OOM killer or an operator would
    (second,) = _pids(tmp_path)
    assert second != first
    assert PARKED.count() == 1


class WaitsForCompany(Noted):
    """Answers once ``company`` instances of its folder have each been called (in 120 s)."""

    def __init__(self, folder: str, company: int) -> None:
        super().__init__(folder)
        self.company = company

    def __call__(self, batch: pa.Table) -> pa.Table:
        (self.folder / f"{self.name}.called").touch()
        guard = time.monotonic() + 120
        while _count(self.folder, "called") < self.company:
            if time.monotonic() > guard:
                raise TimeoutError(f"the step never had {self.company} hosts")
            time.sleep(0.05)
        return super().__call__(batch)


def test_an_action_takes_as_many_kept_hosts_as_its_steps_start_with(tmp_path, keeping):
    # Three hosts of 1 CPU kept, on a 4-CPU cluster. The next action's step of that shape
    # starts with one, and a step of another shape needs 2 CPUs: had the other two stayed kept,
    # that step could not start. (The action keeps only what its steps start with, and its
    # resource watch ends kept hosts when something finds no room: either alone passes this.)
    # Each of the three is called (each call waits until all three were): the driver has seen
    # every one's start by the action's end, so each is kept.
    vane.range(100).map_batches(
        WaitsForCompany,
        schema=SCHEMA,
        batch_size=10,
        concurrency=3,
        fn_constructor_args=(str(tmp_path), 3),
    ).to_pylist()
    assert PARKED.count() == 3
    vane.configure(resource_wait_timeout_s=30)
    try:
        rows = (
            _step(tmp_path, concurrency=(1, 3))
            .map_batches(lambda batch: batch, schema=SCHEMA, batch_size=10, cpus=2, concurrency=1)
            .to_pylist()
        )
    finally:
        vane.configure(resource_wait_timeout_s=Config().resource_wait_timeout_s)
    assert [r["id"] for r in rows] == list(range(ROWS))


def test_hosts_an_ended_step_kept_give_way_to_a_step_that_grows(tmp_path, keeping):
    # The first step's three hosts hold three of the cluster's four GPUs, and each answers
    # (each call waits until all three were called). The step ends before the second step's
    # first batch (the sort waits for its every row), and its hosts are kept for the next
    # action. The second step, of another shape, starts with one host on the fourth GPU, and
    # its calls answer only once two of its hosts were called: it must grow onto a GPU a kept
    # host held.
    vane.configure(worker_idle_timeout_s=600)  # (outlasts the wait of WaitsForCompany)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    rows = 100  # ten batches: more than two hosts hold at once

    def waits(folder: Path, company: int, **options: object) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "batch_size": 10,
            "gpus": 1,
            "fn_constructor_args": (str(folder), company),
            **options,
        }

    answered = (
        vane.range(rows)
        .map_batches(WaitsForCompany, **waits(first, 3, concurrency=3))  # type: ignore[arg-type]
        .order_by("id")
        .map_batches(
            WaitsForCompany,
            **waits(second, 2, cpus=1, concurrency=(1, 2)),  # type: ignore[arg-type]
        )
        .to_pylist()
    )
    assert [r["id"] for r in answered] == list(range(rows))
    assert len({r["pid"] for r in answered}) == 2


class _AddsVariable:
    """Unpickled, adds a variable to its process's environment, as a library a UDF's module
    imports may as it is imported (sentence-transformers adds three)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return _add_variable, (self.name,)


def _add_variable(name: str) -> str:
    os.environ.setdefault(name, "1")
    return name


class NotedAfterImports(Noted):
    def __init__(self, folder: str, imports: object) -> None:
        super().__init__(folder)


def test_a_kept_worker_serves_a_udf_whose_imports_add_variables(tmp_path, keeping):
    # The host unpickles each step's UDF, so what its modules' imports add to the environment
    # lands in the host's process, which starts the worker: the worker must still start as the
    # kept one did, and the kept one serve it.
    (first,) = _pids(tmp_path)
    name = f"VANE_TEST_ADDED_{uuid.uuid4().hex[:8]}"
    adds = vane.range(ROWS).map_batches(
        NotedAfterImports,
        schema=SCHEMA,
        batch_size=10,
        fn_constructor_args=(str(tmp_path), _AddsVariable(name)),
    )
    assert {r["pid"] for r in adds.to_pylist()} == {first}
    # and the variable did not stay for the next step's UDF (the worker unsets what a UDF's
    # imports added)
    assert _pids(tmp_path) == {first}
