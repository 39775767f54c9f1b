"""The totals a UDF stage announces (``StageStarted.total_rows``), which the progress display
turns into a bar, a percentage and an ETA: given where the source knows its size and every step
on the way keeps it, and then exactly the rows the stage reads; None wherever that is not
certain, never an estimate (a wrong total is worse than none)."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from tests.integration import column_udfs
from vane import col
from vane.observe.events import StageFinished, StageStarted, subscribe

BACKENDS = ["thread", "subprocess_actor"]


@dataclass(frozen=True)
class Stage:
    step: str
    total: int | None
    rows_in: int


def stages(action: Callable[[], object]) -> list[Stage]:
    """Each UDF stage ``action`` ran, in the order the steps were built: its announced total
    and the rows it read."""
    started: dict[int, StageStarted] = {}
    finished: dict[int, StageFinished] = {}

    def heard(event: object) -> None:
        if isinstance(event, StageStarted):
            started[event.step_id] = event
        elif isinstance(event, StageFinished):
            finished[event.step_id] = event

    unsubscribe = subscribe(heard)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # on_error="skip" says what it skipped
            action()
    finally:
        unsubscribe()
    assert started.keys() == finished.keys()
    return [
        Stage(started[key].step, started[key].total_rows, finished[key].rows_in)
        for key in sorted(started)
    ]


def plus_one(backend: str) -> object:
    return vane.func(use_process=backend != "thread")(column_udfs.plus_one)


def same(batch: pa.Table) -> pa.Table:
    return batch


def parquet_files(folder: Path, sizes: list[int]) -> vane.Relation:
    start = 0
    for number, size in enumerate(sizes):
        ids = pa.array(range(start, start + size), pa.int64())
        pq.write_table(pa.table({"id": ids}), folder / f"part-{number}.parquet")
        start += size
    return vane.read_parquet(folder)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sources_that_know_their_size_give_the_total(tmp_path, backend):
    f = plus_one(backend)
    sources = {
        "range": vane.range(50),
        "pydict": vane.from_pydict({"id": list(range(50))}),
        "arrow": vane.from_arrow(pa.table({"id": list(range(50))})),
        "pandas": vane.from_pandas(pa.table({"id": list(range(50))}).to_pandas()),
        "parquet footers": parquet_files(tmp_path, [20, 0, 30]),
        "materialized": vane.range(60).filter("id < 50").materialize(),
    }
    for name, source in sources.items():
        rel = source.with_column("y", f(col("id")))
        assert stages(rel.to_arrow) == [Stage("plus_one(id)", 50, 50)], name


def test_sources_that_do_not_know_their_size_give_none(tmp_path):
    (tmp_path / "a.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(30)))
    table = pa.table({"id": list(range(30))})
    sources = {
        "csv": vane.read_csv(tmp_path / "a.csv"),
        "a stream": vane.from_arrow(pa.RecordBatchReader.from_batches(table.schema, [])),
        "filtered": vane.range(60).filter("id % 2 = 0"),
        "joined": vane.range(30).join(vane.range(30), on="id"),
        "queried": vane.range(30).sql("SELECT * FROM rel"),
        "grouped": vane.range(30).aggregate("count(*) AS n", group_by="id").drop("n"),
    }
    for name, source in sources.items():
        rel = source.map_batches(same, schema={"id": "BIGINT"})
        (stage,) = stages(rel.to_arrow)
        assert stage.total is None, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_limit_caps_the_total_and_a_step_read_up_to_a_limit_reads_only_that(backend):
    f = plus_one(backend)
    below = vane.range(50).limit(7, offset=3).with_column("y", f(col("id")))
    assert [s.total for s in stages(below.to_arrow)] == [7]
    # A step that answers each row with one reads just the rows the limit keeps (not a batch
    # more), so the total it announces is what it reads.
    above = vane.range(50_000).with_column("y", f(col("id"))).drop("id").limit(7, offset=2)
    assert stages(above.to_arrow) == [Stage("plus_one(id)", 9, 9)]
    assert stages(vane.range(4).with_column("y", f(col("id"))).limit(7).to_arrow)[0].total == 4
    # a limit below an unknown size, or a step that may answer a row with any number of rows,
    # stops where nobody can say
    unknown = vane.range(50).filter("id > 3").limit(7).with_column("y", f(col("id")))
    assert [s.total for s in stages(unknown.to_arrow)] == [None]
    batches = vane.range(50_000).map_batches(same, schema={"id": "BIGINT"}).limit(7)
    assert [s.total for s in stages(batches.to_arrow)] == [None]
    filtered = vane.range(50_000).with_column("y", f(col("id"))).filter("y > 3").limit(7)
    assert [s.total for s in stages(filtered.to_arrow)] == [None]


def test_a_step_whose_reader_may_stop_early_gives_no_total():
    # Each of these readers leaves most of the step's 5,000 rows unread (a batch or two are
    # read); a total of 5,000 would leave the bar at 1 % when the step ends.
    f = vane.func(batch_size=64)(column_udfs.plus_one)
    rel = vane.range(5000).with_column("y", f(col("id")))
    readers = {
        "a SQL LIMIT": rel.sql("SELECT * FROM rel LIMIT 5"),
        "a join whose other side is empty": rel.join(vane.range(0), on="id"),
        "a limit over a filter": rel.filter("y > 0").limit(5),
        "a limit over a limit": rel.limit(3000).limit(5),
    }
    for name, reader in readers.items():
        (stage,) = stages(reader.to_arrow)
        assert stage.total is None and stage.rows_in < 5000, (name, stage)


def test_steps_that_keep_each_row_pass_the_total_on_and_others_do_not():
    f = vane.func(column_udfs.plus_one)
    kept = (
        vane.range(40)
        .with_column("a", f(col("id")))
        .order_by("id")
        .map(lambda row: row, schema={"id": "BIGINT", "a": "BIGINT"})
        .select("id", f(col("a")).alias("b"))
        .with_column("c", "b + 1")
    )
    assert [s.total for s in stages(kept.to_arrow)] == [40, 40, 40]
    # on_error="skip" answers a failing row with none: the step reads its 40 rows, and what
    # follows reads at most that many, an upper bound that is never shown as a total
    skipped = (
        vane.range(40)
        .with_column("a", column_udfs.fragile_skip(col("id")))
        .with_column("b", f(col("a")))
    )
    assert stages(skipped.to_arrow) == [
        Stage("fragile_skip(id)", 40, 40),
        Stage("plus_one(a)", None, 39),
    ]
    changing = {
        "map_batches": lambda r: r.map_batches(same, schema={"id": "BIGINT"}),
        "flat_map": lambda r: r.flat_map(lambda row: [row], schema={"id": "BIGINT"}),
        "filter": lambda r: r.filter("id > 3"),
        "unnest": lambda r: r.select("id", "unnest([1, 2]) AS u").drop("u"),
    }
    for name, step in changing.items():
        rel = step(vane.range(40)).with_column("y", f(col("id")))
        assert stages(rel.to_arrow)[-1].total is None, name


def test_every_action_reads_what_its_stages_announced(tmp_path):
    f = vane.func(column_udfs.plus_one)
    rel = vane.range(300).with_column("y", f(col("id"))).order_by("y")
    actions = {
        "to_arrow": rel.to_arrow,
        "count": rel.count,
        "write": lambda: rel.write_parquet(tmp_path / "out", mode="overwrite"),
        "iterate": lambda: list(rel.iter_batches(batch_size=16)),
        "explain(analyze=True)": lambda: rel.explain(analyze=True),
    }
    for name, action in actions.items():
        assert stages(action) == [Stage("plus_one(id)", 300, 300)], name


# ---- any pipeline: a total announced is a total read ----------------------------------------


def _double(batch: pa.Table) -> pa.Table:
    return pa.table({"id": batch["id"], "v": pc.multiply(batch["id"], 2)}).select(["id"])


def _twice(row: dict) -> list[dict]:
    return [row] * (row["id"] % 3)


# Small batches, and inputs of many of them: a reader that stops early leaves rows unread.
_F = vane.func(batch_size=64)(column_udfs.plus_one)

STEPS: dict[str, Callable[[vane.Relation], vane.Relation]] = {
    "with_column(udf)": lambda r: r.with_column("u", _F(col("id"))).drop("u"),
    "select(udf)": lambda r: r.select(_F(col("id")).alias("id")),
    "skip": lambda r: r.with_column("u", column_udfs.fragile_skip(col("id"))).drop("u"),
    "map": lambda r: r.map(lambda row: {"id": row["id"]}, schema={"id": "BIGINT"}, batch_size=64),
    "map_batches": lambda r: r.map_batches(_double, schema={"id": "BIGINT"}, batch_size=64),
    "flat_map": lambda r: r.flat_map(_twice, schema={"id": "BIGINT"}, batch_size=64),
    "filter": lambda r: r.filter("id % 4 <> 1"),
    "order_by": lambda r: r.order_by("id", descending=True),
    "with_column(sql)": lambda r: r.with_column("x", "id + 1").drop("x"),
    "unnest": lambda r: r.select("id", "unnest([1, 2]) AS u").drop("u"),
    "unlist": lambda r: r.select("id", "unlist([1, 2]) AS u").drop("u"),
    "generate_subscripts": lambda r: r.select("id", "generate_subscripts([1, 2], 1) AS u"),
    "join": lambda r: r.join(vane.range(60).select("id"), on="id"),
    "join nothing": lambda r: r.join(vane.range(0), on="id"),
    "distinct": lambda r: r.distinct(),
    "sql limit": lambda r: r.sql("SELECT * FROM rel LIMIT 5"),
    "union itself": lambda r: r.union(r),
}


def _limit(n: int, offset: int) -> Callable[[vane.Relation], vane.Relation]:
    return lambda r: r.limit(n, offset)


_step = st.one_of(
    st.sampled_from(sorted(STEPS)).map(lambda name: (name, STEPS[name])),
    st.tuples(st.integers(0, 40), st.integers(0, 5)).map(
        lambda a: (f"limit({a[0]}, {a[1]})", _limit(*a))
    ),
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    source=st.sampled_from(["range", "parquet", "csv"]),
    rows=st.integers(0, 5000),
    steps=st.lists(_step, min_size=1, max_size=5),
    action=st.sampled_from(["to_arrow", "count", "write", "iterate", "first batch"]),
)
def test_a_total_announced_is_the_number_of_rows_the_stage_reads(source, rows, steps, action):
    with tempfile.TemporaryDirectory() as folder:
        rel = vane.range(rows)
        if source == "parquet":
            rel = parquet_files(Path(folder), [rows // 2, rows - rows // 2])
        elif source == "csv":
            (Path(folder) / "in.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(rows)))
            rel = vane.read_csv(Path(folder) / "in.csv", types={"id": "BIGINT"})
        for _, step in steps:
            rel = step(rel)
        run: Callable[[], object] = {
            "to_arrow": rel.to_arrow,
            "count": rel.count,
            "write": lambda: rel.write_parquet(Path(folder) / "out"),
            "iterate": lambda: list(rel.iter_batches(batch_size=16)),
            # a reader that stops early stops the stages short of their totals: not checked
            "first batch": lambda: next(iter(rel.iter_batches(batch_size=16)), None),
        }[action]
        for stage in stages(run):
            if stage.total is not None and action != "first batch":
                assert stage.rows_in == stage.total, ([name for name, _ in steps], stage)


# ---- on Ray ---------------------------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_totals_on_ray(tmp_path, on_ray):
    f = vane.func(column_udfs.plus_one)
    files = parquet_files(tmp_path, [20, 30])
    cases = {
        "range": (vane.range(50).with_column("y", f(col("id"))), [50]),
        "parquet": (files.with_column("y", f(col("id"))), [50]),
        "limit above": (vane.range(5000).with_column("y", f(col("id"))).limit(7), [7]),
        "limit below": (vane.range(50).limit(7).with_column("y", f(col("id"))), [7]),
        "filter": (vane.range(50).filter("id > 3").with_column("y", f(col("id"))), [None]),
        "after map_batches": (
            vane.range(50)
            .map_batches(same, schema={"id": "BIGINT"})
            .with_column("y", f(col("id"))),
            [50, None],
        ),
    }
    for name, (rel, totals) in cases.items():
        ran = stages(rel.to_arrow)
        assert [s.total for s in ran] == totals, name
        assert all(s.rows_in == s.total for s in ran if s.total is not None), (name, ran)
