"""What a Ray action starts beyond its steps' own actors: nothing. The tallies of a driver's
actions live in one actor per driver (``vane/execution/ray/tally.py``), started by its first
action: an actor of its own per action cost a process start in every action."""

from __future__ import annotations

import pyarrow as pa
import pytest

import vane
from tests.conformance.test_backends import N, double
from vane.errors import UDFError
from vane.execution.ray import tally

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SCHEMA = {"id": "BIGINT", "v": "BIGINT"}
EXPECTED = [{"id": i, "v": i * 2} for i in range(N)]


def fails_on_seven(batch: pa.Table) -> dict[str, object]:
    if 7 in batch["id"].to_pylist():
        raise ValueError("not seven")
    return double(batch)


def _tallies() -> list[str]:
    return [handle._actor_id.hex() for handle in tally._driver_tallies.values()]


def _under_way(ray) -> set[int]:
    return {a for h in tally._driver_tallies.values() for a in ray.get(h.open_actions.remote())}


def test_a_drivers_actions_share_one_tally_which_forgets_each_at_its_end(on_ray):
    vane.range(N).map_batches(double, schema=SCHEMA).count()
    first = _tallies()
    before = _under_way(on_ray)  # (another test's stream left to the GC may still be open)
    assert vane.range(N).map_batches(double, schema=SCHEMA).to_pylist() == EXPECTED
    with pytest.raises(UDFError, match="not seven"):
        vane.range(N).map_batches(fails_on_seven, schema=SCHEMA, batch_size=1).to_pylist()
    assert _tallies() == first and len(first) == 1
    assert _under_way(on_ray) <= before


def test_a_tally_that_died_is_replaced_by_the_next_action(tmp_path, on_ray):
    vane.range(N).map_batches(double, schema=SCHEMA).count()
    (handle,) = tally._driver_tallies.values()
    before = _tallies()
    on_ray.kill(handle)
    while True:  # (until the kill has taken: the next action must find it dead)
        try:
            on_ray.get(handle.open_actions.remote())
        except on_ray.exceptions.RayActorError:
            break
    rel = vane.range(N).map_batches(fails_on_seven, schema=SCHEMA, batch_size=1, on_error="skip")
    with pytest.warns(UserWarning, match="skipped 1 row"):
        result = rel.write_parquet(str(tmp_path / "out"))
    # (the counts reached the new tally: the step's summary and its warning come from it)
    assert result.steps[0].rows_in == N and result.steps[0].rows_skipped == 1
    assert len(_tallies()) == 1 and _tallies() != before
