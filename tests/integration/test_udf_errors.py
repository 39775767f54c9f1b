"""What a user sees when a UDF fails: an error catchable by the user's own exception class, a
build-time error naming what cannot be sent to worker processes, warnings at the user's own
line, and advice that works today."""

from __future__ import annotations

import functools
import os
import pickle
import threading
import warnings

import pyarrow as pa
import pytest

import vane
from tests.integration import udfs
from vane.errors import ConfigurationError, UDFError

BACKENDS = ["thread", "subprocess_actor"]

# ---- a user's exception is catchable by its own class -----------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_udf_error_is_also_the_users_exception(backend):
    out = vane.range(30).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=10,
        execution_backend=backend,
        fn_constructor_args=(12,),
    )
    with pytest.raises(ValueError, match=r"rows 10\.\.19") as info:
        out.to_arrow()
    error = info.value
    assert isinstance(error, UDFError) and type(error).__name__ == "UDFError(ValueError)"
    assert isinstance(error.__cause__, ValueError) and str(error.__cause__) == "cannot score row 12"
    assert "shown above" not in str(error) and "__cause__" in str(error)
    copy = pickle.loads(pickle.dumps(error))  # the made-up class pickles as a plain UDFError
    assert type(copy) is UDFError and str(copy) == str(error)


@pytest.mark.parametrize("backend", BACKENDS)
def test_classes_with_their_own_constructor_and_attributes_are_catchable(backend):
    out = vane.range(5).map_batches(
        udfs.RaisesGiven,
        schema={"id": "BIGINT"},
        execution_backend=backend,
        fn_constructor_args=(udfs.TwoArgumentError, 503, "model server overloaded"),
    )
    with pytest.raises(udfs.TwoArgumentError) as info:
        out.to_arrow()
    assert isinstance(info.value, UDFError)
    assert info.value.code == 503  # the user's attributes read through
    assert "TwoArgumentError: [503] model server overloaded" in str(info.value)

    missing = vane.range(5).map_batches(
        udfs.RaisesGiven,
        schema={"id": "BIGINT"},
        execution_backend=backend,
        fn_constructor_args=(FileNotFoundError, 2, "No such file", "/models/x"),
    )
    with pytest.raises(FileNotFoundError) as caught:
        missing.to_arrow()
    assert caught.value.filename == "/models/x" and isinstance(caught.value, UDFError)


def test_a_class_that_cannot_be_combined_keeps_its_name_and_text():
    out = vane.range(5).map_batches(
        udfs.RaisesGiven, schema={"id": "BIGINT"}, fn_constructor_args=(udfs.SealedError, "x")
    )
    with pytest.raises(UDFError, match=r"SealedError: x") as info:
        out.to_arrow()
    assert type(info.value) is UDFError and isinstance(info.value.__cause__, udfs.SealedError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_constructor_is_catchable_by_its_class(backend):
    out = vane.range(5).map_batches(
        udfs.BrokenInit, schema={"id": "BIGINT"}, execution_backend=backend
    )
    with pytest.raises(FileNotFoundError, match="constructing BrokenInit failed") as info:
        out.to_arrow()
    assert isinstance(info.value, UDFError) and "shown above" not in str(info.value)


# ---- what cannot be pickled fails when the step is built ---------------------------------------


def test_an_unpicklable_closure_variable_is_named_when_the_step_is_built():
    guard = threading.Lock()

    def locked(batch):  # type: ignore[no-untyped-def]
        with guard:
            return batch

    for backend in ("subprocess_actor", "subprocess_task"):
        with pytest.raises(ConfigurationError) as info:
            vane.range(3).map_batches(locked, schema={"id": "BIGINT"}, execution_backend=backend)
        message = str(info.value)
        assert "map_batches step `" in message and "locked" in message
        assert "the variable 'guard' captured from the enclosing scope (lock)" in message
        assert "cannot pickle '_thread.lock'" in message and "__init__" in message
    assert vane.range(3).map_batches(locked, schema={"id": "BIGINT"}).count() == 3  # threads


def test_unpicklable_arguments_are_named_when_the_step_is_built(tmp_path):
    with pytest.raises(ConfigurationError, match=r"fn_constructor_args\[1\] \(lock\)"):
        vane.range(3).map_batches(
            udfs.RaisesGiven,
            schema={"id": "BIGINT"},
            execution_backend="subprocess_actor",
            fn_constructor_args=(ValueError, threading.Lock()),
        )
    with open(tmp_path / "log.txt", "w") as log:
        for how, named in (
            ({"fn_kwargs": {"log": log}}, r"fn_kwargs\['log'\] \(TextIOWrapper\)"),
            ({"fn_args": (None, log)}, r"fn_args\[1\] \(TextIOWrapper\)"),
            ({"fn": functools.partial(udfs.noop_logged, log=log)}, r"partial's argument 'log'"),
        ):
            options = {"fn": udfs.noop_logged, **how}
            with pytest.raises(ConfigurationError, match=named):
                vane.range(3).map(
                    schema={"id": "BIGINT"}, execution_backend="subprocess_task", **options
                )


# ---- messages ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_error_warnings_point_at_the_users_line(backend):
    kept = vane.range(40).map_batches(
        udfs.FailOnRow,
        schema={"id": "BIGINT", "score": "BIGINT"},
        batch_size=8,
        execution_backend=backend,
        fn_constructor_args=(20,),
        on_error="null",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept.to_arrow()  # the stage feeds the action directly
        kept.filter("id > 3").count()  # the stage runs under DuckDB, on one of its threads
    assert len(caught) == 2
    for warning in caught:
        assert warning.filename == __file__, warning.filename
        assert "kept 1 failing row as nulls" in str(warning.message)


# A user's script, as it would be typed: the REPL ends the function at the blank line.
SCRIPT = """\
import vane
vane.configure(progress=False)
def score(batch):
    if 13 in batch["id"].to_pylist():
        raise ValueError("cannot score row 13")
    return batch

kept = vane.range(20).map_batches(score, schema={"id": "BIGINT"}, on_error="skip", batch_size=5)
print("wrote", kept.write_parquet("out").rows, "rows", flush=True)
"""


@pytest.mark.parametrize("entry", ["file", "-c", "stdin", "repl"])
def test_an_on_error_warning_never_fails_the_action_whatever_runs_the_script(tmp_path, entry):
    # Python's loader for `python -c`, a script on stdin or the REPL has no source to give the
    # warning's line: the warning is said without it, and the write commits.
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "script.py").write_text(SCRIPT)
    how = {
        "file": ([sys.executable, "script.py"], None),
        "-c": ([sys.executable, "-c", SCRIPT], None),
        "stdin": ([sys.executable, "-"], SCRIPT),
        "repl": ([sys.executable, "-i"], SCRIPT),
    }
    args, stdin = how[entry]
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        args,
        check=False,
        input=stdin,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote 19 rows" in done.stdout, done.stderr
    assert "skipped 1 row on which the function failed" in done.stderr
    assert "ValueError: cannot score row 13" in done.stderr and "Traceback" not in done.stderr
    assert vane.read_parquet(str(tmp_path / "out")).count() == 19


# ---- rows nobody needs never fail the action ----------------------------------------------------


def fails_from_row_4(row: dict) -> dict:
    if row["id"] >= 4:
        raise ValueError(f"cannot score row {row['id']}")
    return row


def fails_from_row_4_batch(batch: pa.Table) -> pa.Table:
    return pa.Table.from_pylist([fails_from_row_4(r) for r in batch.to_pylist()], batch.schema)


@vane.func(batch_size=1)
def fails_from_row_4_column(value: int) -> int:
    return fails_from_row_4({"id": value})["id"] * 2


ID = {"id": "BIGINT"}
STEPS = {
    "map": lambda rel, backend: rel.map(
        fails_from_row_4, schema=ID, batch_size=1, execution_backend=backend
    ),
    "map_batches": lambda rel, backend: rel.map_batches(
        fails_from_row_4_batch, schema=ID, batch_size=1, execution_backend=backend
    ),
    "column_udf": lambda rel, backend: rel.with_column(
        "twice", fails_from_row_4_column(vane.col("id"))
    ),
}


def _first_rows(rel: vane.Relation, n: int) -> list[dict]:
    """Batches of one row, until ``n`` are in: a ``break`` out of the stream."""
    rows = []
    for batch in rel.iter_batches(1):
        rows.extend(batch.to_pylist())
        if len(rows) == n:
            break
    return rows


NEEDS_FOUR = {
    "to_pylist": lambda rel, out: rel.limit(4).to_pylist(),
    "limit_offset": lambda rel, out: rel.limit(2, offset=2).to_pylist(),
    "select": lambda rel, out: rel.select("id").limit(4).to_pylist(),
    "count": lambda rel, out: [{"id": i} for i in range(rel.limit(4).count())],
    "write": lambda rel, out: (
        rel.limit(4).write_parquet(out) and vane.read_parquet(out).order_by("id").to_pylist()
    ),
    "break": lambda rel, out: _first_rows(rel, 4),
}


@pytest.mark.parametrize("needs", list(NEEDS_FOUR))
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_past_what_the_action_needs_never_fail_it(tmp_path, backend, step, needs):
    # Batches run ahead of the reader (and DuckDB reads ahead of a limit): the failing rows
    # 4.. may well run, but the action needs rows 0..3 only, so it gets them.
    rel = STEPS[step](vane.range(100), backend)
    rows = NEEDS_FOUR[needs](rel, str(tmp_path / "out"))
    ids = [r["id"] for r in rows]
    assert ids == ([2, 3] if needs == "limit_offset" else [0, 1, 2, 3])


@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_row_before_the_limit_still_fails_the_action(backend, step):
    rel = STEPS[step](vane.range(100), backend)
    with pytest.raises(ValueError, match="cannot score row 4"):
        rel.limit(5).to_arrow()
    with pytest.raises(ValueError, match="cannot score row 4"):
        _first_rows(rel, 5)


class Seen:
    """Counts, across its instances in this process, the rows it was called on."""

    rows = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        Seen.rows += batch.num_rows
        return batch


def test_a_stream_runs_the_step_only_a_little_ahead_of_its_reader():
    # A reader that stops after one batch: the row-local steps above the UDF step run batch by
    # batch as they are read (DuckDB would run the step some 300,000 rows ahead).
    Seen.rows = 0
    rel = vane.range(100_000).map_batches(Seen, schema=ID, batch_size=10).filter("id % 2 = 0")
    for _ in rel.select("id").iter_batches(5):
        break
    assert 10 <= Seen.rows <= 1_000  # the batches in flight, at most


def test_rows_past_a_limit_never_run_up_the_step_s_summary(tmp_path):
    # The step ends as soon as the limit has its rows: its summary counts only what it handed
    # on, and a write of a limit reports the step.
    result = (
        vane.range(1_000)
        .map_batches(udfs.noop, schema=ID, batch_size=10)
        .limit(25)
        .write_parquet(str(tmp_path / "out"))
    )
    assert result.rows == 25
    (step,) = result.steps
    assert 30 <= step.rows_in < 1_000


def test_too_few_gpus_advises_only_what_works(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ConfigurationError) as info:
        vane.range(3).map_batches(udfs.noop, schema={"id": "BIGINT"}, gpus=1, concurrency=2)
    message = str(info.value)
    assert "runner='ray'" not in message and "CUDA_VISIBLE_DEVICES" in message
