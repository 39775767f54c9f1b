"""Pass-through UDF steps (input columns + the UDF's columns, one row per row) and the optimizer
rules that move filters and projections below them: golden plans before and after, plus equal
results and proof that the model saw less."""

from __future__ import annotations

import pytest

import vane
from tests.integration import udfs
from vane.errors import PlanError, SchemaMismatchError
from vane.observe.events import StageFinished, subscribe
from vane.plan.nodes import UdfStep
from vane.relation import Relation
from vane.types import to_arrow_schema
from vane.udf.build import build_spec


def keep_columns(
    rel: Relation, fn: object, *, reads: tuple[str, ...], schema: dict[str, str], **options: object
) -> Relation:
    """A pass-through step, as the AI functions build them."""
    settings: dict[str, object] = {
        "batch_size": 4,
        "execution_backend": None,
        "concurrency": 1,
        "gpus": 0,
        "cpus": None,
        "memory": None,
        "fn_constructor_args": (),
        "fn_constructor_kwargs": None,
        "fn_kwargs": None,
        "max_concurrency_per_actor": None,
        "max_retries": 0,
        "on_error": "raise",
        "preserve_order": True,
    }
    settings.update(options)
    spec = build_spec(
        "map_batches",
        fn,
        kind="batch",
        reads=reads,
        passthrough=True,
        **settings,  # type: ignore[arg-type]
    )
    return Relation(UdfStep(rel.plan, spec, to_arrow_schema(schema)))


def reviews() -> Relation:
    return vane.from_pydict(
        {
            "id": list(range(10)),
            "text": [f"review {i}" for i in range(10)],
            "blob": [b"x" * 100] * 10,
        }
    )


def shout(rel: Relation, **options: object) -> Relation:
    return keep_columns(
        rel, udfs.ShoutReadsOnlyText, reads=("text",), schema={"shout": "VARCHAR"}, **options
    )


def rows_seen(rel: Relation) -> tuple[list[dict], int]:
    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        rows = rel.to_pylist()
    finally:
        unsubscribe()
    return rows, sum(e.rows_in for e in seen if isinstance(e, StageFinished))


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_pass_through_step_ships_only_what_it_reads_and_keeps_the_rest(backend):
    out = shout(reviews(), execution_backend=backend)
    assert out.columns == ["id", "text", "blob", "shout"]
    rows = out.to_pylist()
    assert [r["shout"] for r in rows] == [f"REVIEW {i}!" for i in range(10)]
    assert [r["id"] for r in rows] == list(range(10))
    assert "MapBatches ShoutReadsOnlyText -> input + [shout]" in out.explain()
    assert "reads=[text]" in out.explain()


def test_skipped_rows_leave_the_carried_columns_too():
    texts = ["ok 0", "ok 1", "bad 2", "ok 3", "ok 4", "ok 5"]
    rel = vane.from_pydict({"id": list(range(6)), "text": texts})
    out = keep_columns(
        rel,
        udfs.ShoutFailsOnBad,
        reads=("text",),
        schema={"shout": "VARCHAR"},
        on_error="skip",
    )
    with pytest.warns(UserWarning, match="skipped 1 row"):
        rows = out.to_pylist()
    assert [(r["id"], r["shout"]) for r in rows] == [
        (0, "OK 0"),
        (1, "OK 1"),
        (3, "OK 3"),
        (4, "OK 4"),
        (5, "OK 5"),
    ]


def test_a_pass_through_step_needs_one_row_per_row_and_new_names():
    rel = vane.from_pydict({"id": [1, 2], "text": ["a", "b"]})
    out = keep_columns(rel, udfs.drop_first_row, reads=("text",), schema={"shout": "VARCHAR"})
    with pytest.raises(SchemaMismatchError, match="returned 1 row for 2"):
        out.to_arrow()
    with pytest.raises(PlanError, match="would shadow input columns"):
        keep_columns(rel, udfs.drop_first_row, reads=("text",), schema={"text": "VARCHAR"})
    with pytest.raises(PlanError, match="no column named 'nope'"):
        keep_columns(rel, udfs.drop_first_row, reads=("nope",), schema={"shout": "VARCHAR"})


def test_a_filter_on_input_columns_runs_before_the_model():
    rel = shout(reviews()).filter("id >= 7")
    assert rel.explain() == (
        "Filter id >= 7\n"
        "  MapBatches ShoutReadsOnlyText -> input + [shout] backend=thread batch_size=4 "
        "concurrency=1 reads=[text]\n"
        "    FromArrow rows=10"
    )
    assert rel.explain(optimized=True) == (
        "MapBatches ShoutReadsOnlyText -> input + [shout] backend=thread batch_size=4 "
        "concurrency=1 reads=[text]\n"
        "  Filter id >= 7\n"
        "    FromArrow rows=10"
    )
    rows, seen = rows_seen(rel)
    assert [r["shout"] for r in rows] == ["REVIEW 7!", "REVIEW 8!", "REVIEW 9!"]
    assert seen == 3  # the model got 3 rows, not 10


def test_a_filter_on_the_models_output_stays_after_it():
    rel = shout(reviews()).filter("shout LIKE '%9!'")
    assert rel.explain(optimized=True) == rel.explain()
    rows, seen = rows_seen(rel)
    assert [r["id"] for r in rows] == [9] and seen == 10


def test_unused_input_columns_are_dropped_before_the_step():
    rel = shout(reviews()).select("id", "shout")
    assert rel.explain(optimized=True) == (
        "Select id, shout\n"
        "  MapBatches ShoutReadsOnlyText -> input + [shout] backend=thread batch_size=4 "
        "concurrency=1 reads=[text]\n"
        "    Select id, text\n"
        "      FromArrow rows=10"
    )
    assert rel.to_pylist()[0] == {"id": 0, "shout": "REVIEW 0!"}
    dropped = shout(reviews()).drop("blob", "text")
    assert dropped.explain(optimized=True).splitlines()[0] == "Drop text"
    assert "Select id, text" in dropped.explain(optimized=True)
    assert dropped.to_pylist()[1] == {"id": 1, "shout": "REVIEW 1!"}


def test_map_batches_is_never_rewritten():
    rel = (
        reviews()
        .map_batches(udfs.noop, schema={"id": "BIGINT", "text": "VARCHAR", "blob": "BLOB"})
        .filter("id > 5")
        .select("id")
    )
    assert rel.explain(optimized=True) == rel.explain()
    assert rel.count() == 4


def test_a_projection_naming_columns_in_another_case_plans_and_runs():
    # DuckDB binds names case-insensitively; the pushdown once compared them exactly, planned
    # `Select ID` above the step, dropped `id` below it, and failed when run.
    rel = shout(reviews()).select("ID", "Shout")
    assert rel.to_pylist()[2] == {"id": 2, "shout": "REVIEW 2!"}
    assert "Select id, text" in rel.explain(optimized=True)


# ---- column UDFs: lifting, and filters and projections around the lifted steps -------------


def test_golden_lifted_calls_with_a_filter_and_a_projection_above():
    from tests.integration import column_udfs as u
    from vane import col

    rel = reviews().with_columns(
        {"mood": u.SentimentClassifier()(col("text")), "n": u.length(col("text"))}
    )
    out = rel.filter(col("id") >= 7).select("id", "mood", "n")
    assert out.explain() == (
        "Select id, mood, n\n"
        "  Filter (id >= 7)\n"
        "    WithColumn mood = SentimentClassifier(text), n = length(text)"
        "  [SentimentClassifier: backend=thread batch_size=default concurrency=1]"
        "  [length: backend=thread batch_size=default concurrency=1]\n"
        "      FromArrow rows=10"
    )
    assert out.explain(optimized=True) == (
        "Select id, mood, n\n"
        "  Drop __vane_udf_0, __vane_udf_1\n"
        "    WithColumn mood = __vane_udf_0, n = __vane_udf_1\n"
        "      Udf length(text) -> input + [__vane_udf_1] backend=thread "
        "batch_size=default concurrency=1 reads=[text]\n"
        "        Udf SentimentClassifier(text) -> input + [__vane_udf_0] backend=thread "
        "batch_size=default concurrency=1 reads=[text]\n"
        "          Select id, text\n"
        "            Filter (id >= 7)\n"
        "              FromArrow rows=10"
    )
    rows, seen = rows_seen(out)
    assert rows == [{"id": i, "mood": "NEGATIVE", "n": len(f"review {i}")} for i in (7, 8, 9)]
    assert seen == 6  # two steps, three rows each: the blob never travelled, 7 rows never ran


def test_golden_nested_calls_under_a_filter_on_a_kept_column():
    from tests.integration import column_udfs as u
    from vane import col

    out = reviews().select("id", u.shout(u.shout(col("text"))).alias("x")).filter("id > 7")
    assert out.explain(optimized=True) == (
        "Select id, __vane_udf_1 AS x\n"
        "  Udf shout(__vane_udf_0) -> input + [__vane_udf_1] backend=thread "
        "batch_size=default concurrency=1 reads=[__vane_udf_0]\n"
        "    Select id, __vane_udf_0\n"
        "      Udf shout(text) -> input + [__vane_udf_0] backend=thread "
        "batch_size=default concurrency=1 reads=[text]\n"
        "        Select id, text\n"
        "          Filter id > 7\n"
        "            FromArrow rows=10"
    )
    assert out.to_pylist() == [{"id": 8, "x": "REVIEW 8!!"}, {"id": 9, "x": "REVIEW 9!!"}]


@pytest.mark.parametrize("window", ["row_number() OVER (ORDER BY id)", "sum(id) OVER ()"])
def test_a_filter_stays_above_a_window_or_aggregate_it_would_change(window):
    from tests.integration import column_udfs as u
    from vane import col

    rel = reviews().with_column("w", window).with_column("s", u.shout(col("text")))
    assert rel.filter("id > 7").select("w").to_pylist() == (
        [{"w": 9}, {"w": 10}] if "row_number" in window else [{"w": 45}, {"w": 45}]
    )
    picked = reviews().select("id", f"{window} AS w", u.shout(col("text")).alias("s"))
    assert [r["w"] for r in picked.filter("id > 7").to_pylist()] == [
        r["w"] for r in picked.to_pylist()[8:]
    ]


def test_golden_two_with_columns_on_one_instance_share_its_actors():
    """One @vane.cls instance called in two with_column steps is constructed once per actor
    (one model load), as in one with_columns call; a step that reads the other's column
    cannot merge and keeps its own."""
    from tests.integration import column_udfs as u
    from vane import col
    from vane.observe.events import StageStarted, subscribe

    model = u.SentimentClassifier()
    out = reviews().with_column("a", model(col("text"))).with_column("b", model(col("text")))
    assert out.explain(optimized=True).count("Udf SentimentClassifier") == 1
    assert "Udf SentimentClassifier(text), SentimentClassifier(text)" in out.explain(optimized=True)
    started: list[object] = []
    unsubscribe = subscribe(lambda e: started.append(e) if isinstance(e, StageStarted) else None)
    try:
        rows = out.to_pylist()
    finally:
        unsubscribe()
    assert len(started) == 1
    assert [r["a"] for r in rows] == [r["b"] for r in rows]
    assert list(rows[0]) == ["id", "text", "blob", "a", "b"]

    chained = reviews().with_column("a", u.shout(col("text"))).with_column("b", u.shout(col("a")))
    assert chained.explain(optimized=True).count("Udf shout") == 2
    assert chained.to_pylist()[0]["b"] == "REVIEW 0!!"
