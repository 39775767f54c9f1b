"""A subplan that two parts of a plan read runs once per action, and materialize() keeps a
result for later actions: a model never runs twice nor gives two answers for one row."""

from __future__ import annotations

import gc
import random

import pyarrow as pa
import pytest

import vane
from tests.integration import column_udfs as u
from vane import col
from vane.observe.events import StageFinished, StageStarted, subscribe


def noisy(batch: pa.Table) -> pa.Table:
    """A different answer every time it runs, as sampling from an LLM gives."""
    return pa.table({"id": batch["id"], "r": [random.random() for _ in range(batch.num_rows)]})


class Stages:
    def __init__(self) -> None:
        self.events: list[object] = []

    def __enter__(self) -> Stages:
        self._unsubscribe = subscribe(self.events.append)
        return self

    def __exit__(self, *exc: object) -> None:
        self._unsubscribe()

    @property
    def started(self) -> int:
        return sum(isinstance(e, StageStarted) for e in self.events)

    @property
    def rows_in(self) -> int:
        return sum(e.rows_in for e in self.events if isinstance(e, StageFinished))


@pytest.fixture(autouse=True)
def _restore_settings(monkeypatch):
    from vane import config

    monkeypatch.setattr(config, "_config", config.get_config())


@pytest.fixture
def spill_dir(tmp_path):
    vane.configure(spill_directory=tmp_path)
    return tmp_path


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_self_join_over_a_model_runs_it_once_and_both_sides_agree(backend):
    scored = vane.range(50).map_batches(
        noisy, schema={"id": "BIGINT", "r": "DOUBLE"}, batch_size=8, execution_backend=backend
    )
    with Stages() as stages:
        rows = scored.join(scored, on="id").to_pylist()
    assert stages.started == 1 and stages.rows_in == 50
    assert len(rows) == 50 and all(r["r"] == r["r_right"] for r in rows)


def test_a_union_and_a_filtered_copy_of_one_model_step_run_it_once():
    scored = vane.range(30).map_batches(noisy, schema={"id": "BIGINT", "r": "DOUBLE"})
    both = scored.union(scored.filter("id < 10"))
    with Stages() as stages:
        rows = both.to_pylist()
    assert stages.started == 1 and len(rows) == 40
    by_id: dict[int, set[float]] = {}
    for row in rows:
        by_id.setdefault(row["id"], set()).add(row["r"])
    assert all(len(answers) == 1 for answers in by_id.values())


def test_a_lifted_column_udf_read_twice_runs_once():
    rel = vane.range(20).with_column("s", u.scaled(col("id"), 3))
    joined = rel.join(rel.filter(col("s") > 30), on="id")
    with Stages() as stages:
        assert joined.count() == 9
    assert stages.started == 1 and stages.rows_in == 20


def test_a_stream_read_twice_in_one_plan_is_read_once():
    table = pa.table({"id": [1, 2, 3]})
    stream = vane.from_arrow(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()))
    assert stream.join(stream, on="id").count() == 3


def test_a_spooled_subplan_past_the_memory_budget_spills_and_cleans_up(spill_dir):
    vane.configure(memory_budget=1)
    scored = vane.range(2000).map_batches(noisy, schema={"id": "BIGINT", "r": "DOUBLE"})
    seen: list[list[str]] = []

    def look(batch: pa.Table) -> pa.Table:
        seen.append(sorted(p.name for p in spill_dir.iterdir()))
        return batch

    joined = scored.join(scored, on="id").map_batches(
        look, schema={"id": "BIGINT", "r": "DOUBLE", "r_right": "DOUBLE"}
    )
    rows = joined.to_pylist()
    assert len(rows) == 2000 and all(r["r"] == r["r_right"] for r in rows)
    assert any(names for names in seen)  # it spilled while the plan ran...
    assert list(spill_dir.iterdir()) == []  # ...and nothing is left after the action


def test_materialize_runs_the_model_once_for_later_actions(tmp_path):
    scored = vane.range(100).map_batches(noisy, schema={"id": "BIGINT", "r": "DOUBLE"})
    with Stages() as stages:
        kept = scored.materialize()
        assert stages.started == 1
        assert kept.count() == 100
        kept.write_parquet(tmp_path / "out")
        first = kept.to_pylist()
        assert kept.filter("id < 5").to_pylist() == first[:5]
    assert stages.started == 1
    assert vane.read_parquet(tmp_path / "out").to_pylist() == first
    assert kept.explain().startswith("Materialized (100 rows")


def test_materialize_spills_past_the_budget_keeps_types_and_order_and_cleans_up(spill_dir):
    rel = vane.sql(
        "SELECT range AS id, [range, 1, 2]::FLOAT[3] AS v, {'a': range::VARCHAR} AS s "
        "FROM range(5000)"
    )
    vane.configure(memory_budget=10_000)
    kept = rel.materialize()
    assert "spilled to" in kept.explain()
    assert len(list(spill_dir.iterdir())) == 1
    assert kept.schema == rel.schema
    assert kept.to_arrow().equals(rel.to_arrow())
    del kept
    gc.collect()
    assert list(spill_dir.iterdir()) == []


def test_configure_checks_the_new_settings(tmp_path):
    with pytest.raises(vane.errors.ConfigurationError, match="memory_budget"):
        vane.configure(memory_budget=0)
    with pytest.raises(vane.errors.ConfigurationError, match="not an existing directory"):
        vane.configure(spill_directory=tmp_path / "missing")
