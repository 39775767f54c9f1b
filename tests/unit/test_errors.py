"""Errors: one tree under VaneError, builtin bases where natural, DuckDB's text kept."""

from __future__ import annotations

import inspect

import duckdb
import pytest

import vane
from vane import errors


def test_every_error_is_a_vane_error():
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__
    ]
    assert set(errors.__all__) == {c.__name__ for c in classes}
    for cls in classes:
        assert issubclass(cls, errors.VaneError)


def test_builtin_bases():
    assert issubclass(errors.ConfigurationError, ValueError)
    assert issubclass(errors.PlanError, ValueError)
    assert issubclass(errors.SourceNotFoundError, FileNotFoundError)
    assert issubclass(errors.SinkError, OSError)
    assert issubclass(errors.ExecutionError, RuntimeError)
    assert issubclass(errors.MissingDependencyError, ImportError)


def test_the_tree_in_the_docstring_names_every_error():
    for name in errors.__all__:
        assert name in errors.__doc__


def test_unknown_column_names_the_step_keeps_duckdb_text_and_lists_columns():
    rel = vane.from_pydict({"id": [1], "score": [0.5]})
    with pytest.raises(errors.PlanError) as info:
        rel.filter("scroe > 0.1")
    message = str(info.value)
    assert "Filter scroe > 0.1" in message  # the step
    assert '"scroe" not found' in message  # DuckDB's own words
    assert "Input columns: id, score" in message  # the fix
    assert isinstance(info.value.__cause__, duckdb.BinderException)


def test_sql_syntax_error_is_a_plan_error():
    with pytest.raises(errors.PlanError, match="syntax error"):
        vane.range(3).select("id +")


def test_bad_verb_arguments():
    rel = vane.range(3)
    with pytest.raises(errors.PlanError, match="no column named 'nope'"):
        rel.drop("nope")
    with pytest.raises(errors.PlanError, match="every column"):
        rel.drop("id")
    with pytest.raises(errors.PlanError, match="no column named 'x'"):
        rel.rename({"x": "y"})
    with pytest.raises(errors.PlanError, match="integer >= 0"):
        rel.limit(-1)
    with pytest.raises(errors.PlanError, match="how='sideways'"):
        rel.join(rel, on="id", how="sideways")  # type: ignore[arg-type]
    with pytest.raises(errors.PlanError, match="either on="):
        rel.join(rel)
    with pytest.raises(errors.PlanError, match="left_on has 1 keys and right_on has 2"):
        rel.join(rel, left_on="id", right_on=["id", "id"])
    with pytest.raises(errors.PlanError, match="more than once"):
        rel.select("id", "id")
    with pytest.raises(errors.PlanError, match="non-empty SQL string"):
        rel.filter("")


def test_runtime_failure_is_an_execution_error_with_the_plan():
    rel = vane.range(10).with_column("x", "CASE WHEN id = 7 THEN error('bad row 7') END")
    with pytest.raises(errors.ExecutionError) as info:
        rel.to_arrow()
    assert "bad row 7" in str(info.value)
    assert "WithColumn x" in str(info.value)
    with pytest.raises(errors.ExecutionError, match="bad row 7"):
        list(rel.iter_batches(2))


def test_configure_rejects_unknown_settings():
    with pytest.raises(errors.ConfigurationError, match="runner='spark'"):
        vane.configure(runner="spark")
    with pytest.raises(errors.ConfigurationError):
        vane.configure(batch_size=0)


def test_a_configure_that_cannot_connect_to_ray_changes_no_setting():
    # In a process of its own: the suite's own Ray cluster must not be the one it finds.
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("ray")
    script = """
import ray, vane, vane.config
from vane import errors
before = vane.config.get_config()
try:
    # ray.init refuses num_cpus for a cluster it would join, before it tries to reach it
    vane.configure(runner="ray", batch_size=7, address="127.0.0.1:1", num_cpus=1)
except errors.ConfigurationError as error:
    assert "could not connect" in str(error), error
else:
    raise AssertionError("configure connected")
assert vane.config.get_config() == before
assert not ray.is_initialized()
print("unchanged")
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
        timeout=300,  # a guard against a hang, not a measure
        check=False,
    )
    assert done.returncode == 0 and "unchanged" in done.stdout, done.stderr
