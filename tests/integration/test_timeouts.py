"""batch_timeout_s and actor_start_timeout_s: a UDF that hangs fails its batch (then the usual
retries and on_error) instead of hanging the job; a constructor that hangs fails the job."""

from __future__ import annotations

import pytest

import vane
from tests.integration import udfs
from tests.integration.support import gone, worker_pids
from vane.errors import UDFError

BACKENDS = ["thread", "subprocess_actor"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hung_batch_fails_with_a_timeout_error_saying_where_it_was_stuck(
    tmp_path, backend, release_hung
):
    marker = tmp_path / "hung"
    out = vane.range(20).map_batches(
        udfs.HangOnRow,
        schema={"id": "BIGINT"},
        batch_size=4,
        execution_backend=backend,
        fn_constructor_args=(5, str(marker)),
        batch_timeout_s=1,
    )
    with pytest.raises(UDFError) as info:
        out.to_arrow()
    assert isinstance(info.value, TimeoutError)  # catchable as the builtin, too
    message = str(info.value)
    assert "rows 4..7 did not finish within batch_timeout_s=1 s (after 1 attempt)" in message
    assert "udfs.py" in message and "in __call__ (RELEASE.wait())" in message
    assert "on_error='skip'" in message
    if backend == "thread":
        assert "left running in the background" in message
    else:
        assert gone(int(marker.read_text()), within=10)  # the hung worker does not linger


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hung_attempt_is_retried_on_a_replacement_actor(tmp_path, backend, caplog, release_hung):
    out = vane.range(20).map_batches(
        udfs.HangOnRow,
        schema={"id": "BIGINT"},
        batch_size=4,
        execution_backend=backend,
        fn_constructor_args=(5, str(tmp_path / "hung-once")),
        batch_timeout_s=1,
        max_retries=1,
    )
    assert out.to_arrow()["id"].to_pylist() == list(range(20))
    assert "did not finish within batch_timeout_s=1 s; starting a replacement" in caplog.text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_call_is_cancelled_at_its_timeout_and_handled_by_on_error(backend):
    out = vane.range(12).map_batches(
        udfs.AsyncHangOnRow,
        schema={"id": "BIGINT"},
        batch_size=4,
        execution_backend=backend,
        fn_constructor_args=(5,),
        batch_timeout_s=0.5,
        on_error="null",
    )
    with pytest.warns(UserWarning, match="kept 1 failing row"):
        rows = out.to_pylist()
    # the failing row is kept, its columns null: the function answered nothing for it
    assert [r["id"] for r in rows] == [*range(5), None, *range(6, 12)]
    assert [i for i, r in enumerate(rows) if r["error"]] == [5]
    assert rows[5]["error"] == "TimeoutError: the call did not finish within batch_timeout_s=0.5 s"


@pytest.mark.timeout(120)
def test_an_async_call_that_blocks_its_event_loop_is_given_up_on(release_hung):
    out = vane.range(12).map_batches(
        udfs.AsyncBlocksLoopOnRow,
        schema={"id": "BIGINT"},
        batch_size=4,
        fn_constructor_args=(5,),
        batch_timeout_s=0.5,
    )
    with pytest.raises(UDFError, match=r"rows 4\.\.7 did not finish") as info:
        out.to_arrow()
    assert isinstance(info.value, TimeoutError)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_constructor_that_hangs_fails_at_its_start_timeout(tmp_path, backend, release_hung):
    out = vane.range(10).map_batches(
        udfs.SlowInit,
        schema={"id": "BIGINT"},
        execution_backend=backend,
        fn_constructor_args=(str(tmp_path),),
        actor_start_timeout_s=4,
    )
    before = worker_pids()
    with pytest.raises(UDFError, match=r"did not finish within actor_start_timeout_s=4 s") as info:
        out.to_arrow()
    assert isinstance(info.value, TimeoutError)
    assert "raise actor_start_timeout_s" in str(info.value)
    # Its worker (which may or may not have reached the constructor by then) is ended.
    assert all(gone(pid, within=30) for pid in worker_pids() - before)


def test_timeouts_are_checked_when_the_step_is_built():
    from vane.errors import ConfigurationError

    for bad in (0, -1, "5", True):
        with pytest.raises(ConfigurationError, match="batch_timeout_s must be a number of sec"):
            vane.range(3).map_batches(udfs.noop, schema={"id": "BIGINT"}, batch_timeout_s=bad)
    with pytest.raises(ConfigurationError, match="actor_start_timeout_s"):
        vane.range(3).map(udfs.noop, schema={"id": "BIGINT"}, actor_start_timeout_s=0)
    # None means no limit
    rel = vane.range(3).map_batches(udfs.noop, schema={"id": "BIGINT"}, actor_start_timeout_s=None)
    assert rel.count() == 3
