"""The shared-memory slots of subprocess actors (``vane.execution.actors.shm``): batches and
results that outgrow a slot, tables that travel inline instead, more batches in flight than
slots, and nothing left behind by a pipeline or a killed worker."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import vane
from tests.integration import udfs
from vane.execution.actors import shm
from vane.execution.actors.subprocess import PLAIN_BATCHES_IN_FLIGHT

# One slot per batch an actor holds at once.
SLOTS = min(PLAIN_BATCHES_IN_FLIGHT, shm.MAX_SLOTS)

SCHEMA = {"id": "BIGINT", "text": "VARCHAR", "slots": "BIGINT", "slot_bytes": "BIGINT"}


def _rows(count: int, width: int) -> pa.Table:
    ids = pa.array(range(count), pa.int64())
    text = pc.binary_join_element_wise(pc.cast(ids, pa.string()), "x" * width, ":")
    return pa.table({"id": ids, "text": text})


def _ours_in_dev_shm() -> set[str]:
    # POSIX semaphores of other processes on the machine come and go there: not ours.
    return {name for name in os.listdir("/dev/shm") if not name.startswith("sem.")}


def _driver_lets_go_of_its_slots() -> bool:
    """True once this process holds no slot: no descriptor, no mapping (the pool's threads
    close them just after the action returns)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open("/proc/self/maps") as maps:
            mapped = "vane-slot" in maps.read()
        if not mapped and not udfs.slot_files():
            return True
        time.sleep(0.05)
    return False


def _echo(table: pa.Table, udf: type, batch_size: int, **options: object) -> pa.Table:
    return (
        vane.from_arrow(table)
        .map_batches(
            udf,
            schema=SCHEMA,
            batch_size=batch_size,
            execution_backend="subprocess_actor",
            **options,
        )
        .to_arrow()
    )


@pytest.mark.timeout(180)
def test_batches_and_results_larger_than_a_slot_grow_it():
    # 500 rows of ~4 KiB: each batch is ~2 MiB, twice a new slot, and each result ~6 MiB.
    table = _rows(2_000, 4_096)
    before = _ours_in_dev_shm()
    out = _echo(table, udfs.EchoWithSlots, 500, fn_constructor_args=(3,))
    assert out["id"] == table["id"]
    assert out["text"] == pc.binary_repeat(table["text"], 3)
    # Each batch reached the worker through a slot that had grown to hold it.
    assert set(out["slots"].to_pylist()) == {SLOTS}
    assert min(out["slot_bytes"].to_pylist()) > shm.MIN_SLOT_BYTES
    assert _driver_lets_go_of_its_slots()
    assert _ours_in_dev_shm() <= before


@pytest.mark.timeout(180)
def test_tables_larger_than_the_slot_limit_travel_inline(monkeypatch):
    limit = 256 * 1024
    monkeypatch.setattr(shm, "SLOT_LIMIT", limit)  # read by the pool, sent to the worker
    # Batches of 100 rows: the first five of ~3 KiB (slots), the last five of ~400 KiB (inline).
    small, large = _rows(500, 20), _rows(500, 4_000)
    large = large.set_column(0, "id", pc.add(large["id"], 500))
    table = pa.concat_tables([small, large])
    out = _echo(table, udfs.EchoWithSlots, 100)
    assert out["id"] == table["id"] and out["text"] == table["text"]
    # No slot grew past the limit: the large batches and results went by the pipe.
    assert set(out["slot_bytes"].to_pylist()) == {limit}
    assert _driver_lets_go_of_its_slots()


@pytest.mark.timeout(180)
def test_more_batches_in_flight_than_slots_travel_inline():
    out = (
        vane.range(4_000)
        .map_batches(
            udfs.AsyncSleeper,
            schema={"id": "BIGINT", "overlap": "BIGINT"},
            batch_size=20,
            execution_backend="subprocess_actor",
            max_concurrency_per_actor=3 * shm.MAX_SLOTS,
            fn_constructor_args=(shm.MAX_SLOTS + 1,),
        )
        .to_arrow()
    )
    assert out["id"].to_pylist() == list(range(4_000))
    assert max(out["overlap"].to_pylist()) > shm.MAX_SLOTS  # more calls at once than slots
    assert _driver_lets_go_of_its_slots()


@pytest.mark.timeout(180)
def test_a_worker_killed_holding_a_slot_is_replaced_and_leaves_nothing(tmp_path):
    table = _rows(3_000, 2_000)  # batches of ~1 MiB
    before = _ours_in_dev_shm()
    out = _echo(table, udfs.KillOnceWithSlots, 500, fn_constructor_args=(str(tmp_path / "m"),))
    assert (tmp_path / "m").exists()  # the first worker did die mid-batch
    assert out["id"] == table["id"] and out["text"] == table["text"]
    assert set(out["slots"].to_pylist()) == {SLOTS}  # the replacement has slots of its own
    assert _driver_lets_go_of_its_slots()
    assert _ours_in_dev_shm() <= before


@pytest.mark.timeout(180)
def test_many_batches_reuse_the_same_slots():
    table = _rows(20_000, 40)
    out = _echo(table, udfs.EchoWithSlots, 64)
    assert out.num_rows == 20_000
    assert out["id"] == table["id"] and out["text"] == table["text"]
    assert set(out["slots"].to_pylist()) == {SLOTS}
    assert set(out["slot_bytes"].to_pylist()) == {shm.MIN_SLOT_BYTES}
    assert _driver_lets_go_of_its_slots()
