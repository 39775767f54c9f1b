"""A UDF class's ``teardown()`` (plain or async) runs once per actor after its last batch, on
every backend; its error is logged, never raised; vane's own AI providers use it to close their
connection pools on the loop that made them."""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

import vane
from tests.integration.support import gone

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["thread", "subprocess_actor"]


class Marks:
    """Leaves ``<pid>-<id>.done`` in ``directory`` from teardown()."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.batches = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.batches += 1
        return batch

    def teardown(self) -> None:
        (self.directory / f"{os.getpid()}-{id(self)}.done").write_text(str(self.batches))


class AsyncMarks(Marks):
    async def __call__(self, batch: pa.Table) -> pa.Table:  # type: ignore[override]
        self.batches += 1
        return batch

    async def teardown(self) -> None:  # type: ignore[override]
        super().teardown()


class FailingTeardown(Marks):
    def teardown(self) -> None:
        raise RuntimeError("cannot close")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [Marks, AsyncMarks])
def test_teardown_runs_once_per_actor_after_every_batch(tmp_path, backend, cls):
    out = vane.range(100).map_batches(
        cls,
        schema={"id": "BIGINT"},
        batch_size=10,
        concurrency=2,
        execution_backend=backend,
        fn_constructor_args=(str(tmp_path),),
    )
    assert out.count() == 100
    done = list(tmp_path.glob("*.done"))
    assert len(done) == 2  # one per actor
    assert sum(int(p.read_text()) for p in done) == 10  # after the last batch of each


class SlowExit(Marks):
    """Marks, whose worker's interpreter then takes its time to exit: an atexit handler that
    waits for a ``release`` file (``<pid>.exiting`` says it started, ``<pid>.exited`` it ended)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        atexit.register(self._linger)

    def _linger(self) -> None:
        pid = os.getpid()
        (self.directory / f"{pid}.exiting").touch()
        deadline = time.monotonic() + 60
        while not (self.directory / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        (self.directory / f"{pid}.exited").touch()


@pytest.mark.timeout(120)
def test_an_action_returns_after_teardown_without_waiting_for_the_worker_to_exit(tmp_path):
    out = vane.range(10).map_batches(
        SlowExit,
        schema={"id": "BIGINT"},
        execution_backend="subprocess_actor",
        fn_constructor_args=(str(tmp_path),),
    )
    assert out.count() == 10
    (done,) = tmp_path.glob("*.done")  # teardown() ran before the action returned
    pid = int(done.name.split("-")[0])
    # The worker is still exiting: the action did not wait for its interpreter to wind down.
    assert not gone(pid, within=0.1) and not (tmp_path / f"{pid}.exited").exists()
    (tmp_path / "release").touch()
    assert gone(pid, within=30)
    assert (tmp_path / f"{pid}.exiting").exists() and (tmp_path / f"{pid}.exited").exists()


def test_a_failing_teardown_is_logged_and_the_job_succeeds(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="vane"):
        out = vane.range(10).map_batches(
            FailingTeardown, schema={"id": "BIGINT"}, fn_constructor_args=(str(tmp_path),)
        )
        assert out.count() == 10
    assert "teardown() raised RuntimeError: cannot close" in caplog.text


@vane.cls
class Closing:
    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def __call__(self, value: int) -> int:
        return value + 1

    def teardown(self) -> None:
        (self.directory / "closed").touch()


def test_a_column_udf_class_is_torn_down_too(tmp_path):
    udf = Closing(str(tmp_path))
    rows = vane.range(3).with_column("next", udf(vane.col("id"))).to_pylist()
    assert [r["next"] for r in rows] == [1, 2, 3]
    assert (tmp_path / "closed").exists()


@pytest.mark.parametrize(
    "action",
    ["assert len(out.to_pylist()) == 30", "out.show(3)", "next(iter(out.iter_batches(2)))"],
)
def test_prompt_closes_its_connection_pool(tmp_path, action):
    pytest.importorskip("aiohttp")
    script = textwrap.dedent(
        f"""
        import gc
        import vane
        from tests.ai_server import FakeServer
        vane.configure(progress=False)
        server = FakeServer().start()
        rel = vane.from_pydict({{"text": [str(i) for i in range(30)]}})
        out = rel.prompt("text", base_url=server.base_url, api_key="k", model="m", batch_size=2)
        {action}
        gc.collect()
        server.stop()
        print("done")
        """
    )
    run = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "done" in run.stdout
    assert "Unclosed client session" not in run.stderr, run.stderr


# ---- an action that needs no more rows ends its stages gracefully ------------------------------


def _first_batch(rel: vane.Relation) -> None:
    for _ in rel.iter_batches(10):
        return  # a `break`: the stream is closed here


EARLY_ENDS = {
    "limit": lambda rel, out: rel.limit(5).to_arrow(),
    "show": lambda rel, out: rel.show(3),
    "write_limit": lambda rel, out: rel.limit(5).write_parquet(out),
    "count_limit": lambda rel, out: rel.limit(5).count(),
    "limit_of_select": lambda rel, out: rel.select("id").limit(5).to_arrow(),
    # DuckDB stops asking for rows once it has them: the stage ends with the action
    "filter_limit": lambda rel, out: rel.filter("id % 3 = 0").limit(5).to_arrow(),
    "break": lambda rel, out: _first_batch(rel),
}


@pytest.mark.parametrize("end", list(EARLY_ENDS))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [Marks, AsyncMarks])
def test_teardown_runs_on_every_actor_when_the_action_needs_no_more_rows(
    tmp_path, backend, cls, end
):
    marks = tmp_path / "marks"
    marks.mkdir()
    rel = vane.range(100_000).map_batches(
        cls,
        schema={"id": "BIGINT"},
        batch_size=100,
        concurrency=2,
        execution_backend=backend,
        fn_constructor_args=(str(marks),),
    )
    EARLY_ENDS[end](rel, str(tmp_path / "out"))
    assert len(list(marks.glob("*.done"))) == 2  # one per actor, as the action returned


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_limit_met_while_a_call_hangs_returns_at_the_call_s_timeout(
    tmp_path, backend, release_hung
):
    # The rows needed are in while another actor's call hangs: the action waits for that call
    # as long as batch_timeout_s lets it run, then gives it up, and returns.
    from tests.integration import udfs

    marker = tmp_path / "hung"
    rel = vane.range(20).map_batches(
        udfs.HangsWhileTheFirstRowsWait,
        schema={"id": "BIGINT"},
        batch_size=5,
        concurrency=2,
        execution_backend=backend,
        batch_timeout_s=2,
        fn_constructor_args=(5, str(marker)),
    )
    assert rel.limit(3).to_arrow()["id"].to_pylist() == [0, 1, 2]
    assert marker.exists()
    if backend == "subprocess_actor":
        assert gone(int(marker.read_text()), within=30)


class Released(Marks):
    """Marks, whose instance leaves ``<pid>-<id>.born`` when it is constructed and
    ``<pid>-<id>.released`` when it is let go of: Ray Data's users clean up in ``__del__``."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        (self.directory / f"{os.getpid()}-{id(self)}.born").touch()

    def __del__(self) -> None:
        (self.directory / f"{os.getpid()}-{id(self)}.released").touch()


class ReleasedAfterAnError(Released):
    """Raises on every other batch (skipped): the tracebacks kept on the way hold the instance
    in reference cycles, which a plain drop of the last reference does not free."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.batches += 1
        if self.batches % 2:
            raise ValueError("odd batch")
        return batch


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [Released, ReleasedAfterAnError])
@pytest.mark.parametrize("end", ["count", "limit"])
def test_the_udf_instance_is_released_when_its_actor_ends(tmp_path, backend, cls, end):
    import warnings

    rel = vane.range(1_000).map_batches(
        cls,
        schema={"id": "BIGINT"},
        batch_size=10,
        concurrency=2,
        execution_backend=backend,
        on_error="skip",
        fn_constructor_args=(str(tmp_path),),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the skipped rows
        rel.count() if end == "count" else rel.limit(5).to_arrow()
    assert len(list(tmp_path.glob("*.released"))) == 2
    assert len(list(tmp_path.glob("*.done"))) == 2  # teardown() first
