"""Quick calls travel to their actor in units of several batches (``vane.execution.stage``): the
function still gets ``batch_size`` rows per call, in order, and a fault inside a unit is handled
and reported as if every batch had travelled alone."""

from __future__ import annotations

import pytest

import vane
from tests.integration import column_udfs as u
from tests.integration import udfs
from vane import col
from vane.errors import ActorDiedError, UDFError
from vane.observe.events import BatchDone, subscribe

BACKENDS = ["thread", "subprocess_actor"]
ROWS = 6_000
BAD = 5_003  # late enough that units have formed; its batch of 10 is rows 5000..5009


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_quick_calls_travel_in_units_and_each_call_gets_its_batch(backend):
    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        table = (
            vane.range(ROWS)
            .map_batches(
                udfs.CallSizes,
                schema={"id": "BIGINT", "call_rows": "BIGINT", "call_first": "BIGINT"},
                batch_size=10,
                execution_backend=backend,
            )
            .to_arrow()
        )
    finally:
        unsubscribe()
    ids = table["id"].to_pylist()
    assert ids == list(range(ROWS))
    # Every call got exactly its own ten rows, as without units.
    assert set(table["call_rows"].to_pylist()) == {10}
    assert table["call_first"].to_pylist() == [i - i % 10 for i in ids]
    # ... but far fewer hand-offs than calls: one event per unit.
    units = [e for e in seen if isinstance(e, BatchDone)]
    assert sum(e.rows_in for e in units) == ROWS
    assert len(units) < ROWS // 10 // 2, len(units)


def on_bad(udf: type, backend: str, **options: object) -> vane.Relation:
    """``udf`` (built with the row it fails on) over ROWS rows in batches of 10."""
    return vane.range(ROWS).map_batches(
        udf,
        schema={"id": "BIGINT"},
        batch_size=10,
        execution_backend=backend,
        fn_constructor_args=((BAD,) if udf is udfs.ExitOnRows else BAD,),
        **options,
    )


@pytest.mark.timeout(180)
def test_a_row_that_kills_its_worker_inside_a_unit_is_skipped_alone():
    out = on_bad(udfs.ExitOnRows, "subprocess_actor", on_error="skip")
    with pytest.warns(UserWarning, match="skipped 1 row") as caught:
        ids = out.to_arrow()["id"].to_pylist()
    assert ids == [i for i in range(ROWS) if i != BAD]
    (warning,) = [str(w.message) for w in caught]
    assert f"input row {BAD}: the worker process" in warning


@pytest.mark.timeout(180)
def test_under_raise_a_death_inside_a_unit_names_its_own_batch():
    with pytest.raises(ActorDiedError, match=r"while running input rows 5000\.\.5009,"):
        on_bad(udfs.ExitOnRows, "subprocess_actor").to_arrow()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_row_that_hangs_inside_a_unit_is_skipped_alone(backend, release_hung):
    out = on_bad(udfs.HangOnRow, backend, batch_timeout_s=0.5, on_error="skip")
    with pytest.warns(UserWarning, match=rf"input row {BAD}: the call did not finish within"):
        ids = out.to_arrow()["id"].to_pylist()
    assert ids == [i for i in range(ROWS) if i != BAD]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", BACKENDS)
def test_under_raise_a_hang_inside_a_unit_names_its_own_batch(backend, release_hung):
    with pytest.raises(UDFError, match=r"input rows 5000\.\.5009 did not finish within"):
        on_bad(udfs.HangOnRow, backend, batch_timeout_s=0.5).to_arrow()


@pytest.mark.parametrize("backend", BACKENDS)
def test_under_raise_an_error_inside_a_unit_names_its_own_batch(backend):
    out = vane.range(ROWS).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=10,
        execution_backend=backend,
        fn_constructor_args=(BAD,),
    )
    with pytest.raises(UDFError, match=rf"raised on input rows 5000\.\.5009 .*row {BAD}"):
        out.to_arrow()


def test_a_column_udf_keeps_its_input_rows_aligned_when_one_inside_a_unit_is_skipped():
    rel = vane.range(ROWS)
    with pytest.warns(UserWarning, match="skipped 1 row"):
        table = rel.with_column("y", u.fragile_skip_in_small_batches(col("id"))).to_arrow()
    ids = table["id"].to_pylist()
    assert ids == [i for i in range(ROWS) if i != 4003]
    assert table["y"].to_pylist() == [i * 10 for i in ids]
