"""Column UDFs (@vane.func, @vane.cls, @vane.method) in select, with_column and filter: they add
a column next to the rows, run in actors that construct the class once, and lift into
pass-through steps that ship only their arguments."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pyarrow as pa
import pytest

import vane
from tests.integration import column_udfs as u
from vane import col
from vane.errors import ConfigurationError, PlanError, SchemaError, SchemaMismatchError
from vane.observe.events import StageFinished, subscribe

REVIEWS = [
    "This product is amazing",
    "Worst purchase I've ever made",
    "It's okay, nothing special",
]


def reviews() -> vane.Relation:
    return vane.from_pydict({"id": [1, 2, 3], "review": REVIEWS})


def test_seed_sentiment_classifier_as_written():
    classifier = u.SentimentClassifier()
    df = vane.from_pydict({"review": REVIEWS})
    df = df.select(classifier(df["review"]).alias("sentiment"))
    assert df.to_pylist() == [
        {"sentiment": "POSITIVE"},
        {"sentiment": "NEGATIVE"},
        {"sentiment": "NEGATIVE"},
    ]


def test_with_column_keeps_the_rows_and_their_keys():
    out = reviews().with_column("sentiment", u.SentimentClassifier()(col("review")))
    assert out.columns == ["id", "review", "sentiment"]
    assert [(r["id"], r["sentiment"]) for r in out.to_pylist()] == [
        (1, "POSITIVE"),
        (2, "NEGATIVE"),
        (3, "NEGATIVE"),
    ]


def test_a_call_is_named_after_its_first_argument_and_explain_shows_the_lifted_step():
    out = reviews().select("id", u.shout(col("review")))
    assert out.columns == ["id", "review"]
    assert out.explain() == (
        "Select id, shout(review) AS review"
        "  [shout: backend=thread batch_size=default concurrency=1]\n"
        "  FromArrow rows=3"
    )
    lifted = out.explain(optimized=True)
    assert "Udf shout(review) -> input + [__vane_udf_0]" in lifted
    assert "reads=[review]" in lifted
    assert out.to_pylist()[0] == {"id": 1, "review": "THIS PRODUCT IS AMAZING!"}


@pytest.mark.slow
def test_seed_text_embedder_equals_encode_directly():
    from sentence_transformers import SentenceTransformer

    embedder = u.TextEmbedder()
    texts = [f"document {i} about {'cats' if i % 2 else 'engines'}" for i in range(40)]
    df = vane.from_pydict({"document": texts})
    out = df.select(embedder.embed(df["document"]).alias("embedding")).to_arrow()
    assert out.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    direct = np.vstack([model.encode(texts[i : i + 16]) for i in range(0, 40, 16)])
    got = np.array(out["embedding"].to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(got, direct, rtol=0, atol=1e-5)


def test_struct_return_types_from_typed_dict_dataclass_and_return_dtype():
    analyzer = u.Analyzer()
    out = vane.from_pydict({"text": ["big cat", "a"]}).select(
        analyzer(col("text")).alias("verdict"),
        analyzer.span(col("text")).alias("span"),
        analyzer.first_word(col("text")).alias("first"),
    )
    assert [str(f.type) for f in out.schema] == [
        "struct<label: string, score: double>",
        "struct<start: int64, end: int64>",
        "struct<first: string, n: int32>",
    ]
    assert out.to_pylist()[0] == {
        "verdict": {"label": "b", "score": 7.0},
        "span": {"start": 0, "end": 7},
        "first": {"first": "big", "n": 2},
    }


def test_calls_on_one_instance_share_one_step_and_one_object_per_process(tmp_path):
    counted = u.CountedInProcess(str(tmp_path))
    rel = vane.range(24).select(
        "id", counted(col("id")).alias("pid"), counted.double(col("id")).alias("twice")
    )
    plan = rel.explain(optimized=True)
    assert plan.count("Udf ") == 1 and "backend=subprocess_actor" in plan
    assert "concurrency=2" in plan and "batch_size=4" in plan
    rows = rel.to_pylist()
    assert [r["twice"] for r in rows] == [2 * i for i in range(24)]
    pids = {r["pid"] for r in rows}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    markers = list(tmp_path.iterdir())
    # Constructed once per actor, never in the driver, never per batch.
    assert len(markers) == len({m.name.split("-")[0] for m in markers}) == len(pids)
    assert {int(m.read_text()) for m in markers} == pids


def test_async_row_methods_overlap_rows():
    out = vane.range(40).select(u.AsyncClient()(col("id")).alias("peak")).to_pylist()
    assert max(r["peak"] for r in out) > 4


def test_an_async_class_scales_between_min_and_max_actors():
    out = vane.range(40).select(col("id"), u.ScalingAsyncClient()(col("id")).alias("peak"))
    assert "concurrency=(1, 2)" in out.explain(optimized=True)
    rows = out.to_pylist()
    assert [r["id"] for r in rows] == list(range(40))
    assert max(r["peak"] for r in rows) > 2  # rows overlap: (1, 2) counts actors, not rows


def test_arguments_can_be_expressions_constants_and_keywords():
    rel = vane.from_pydict({"v": [1, 2], "w": [4, 8]})
    out = rel.select(
        u.scaled(col("v") + col("w"), 10, offset=1).alias("a"),
        u.scaled(col("v"), factor=3).alias("b"),
        u.ratio(col("v"), col("w")).alias("r"),
        u.length(col("v").cast("VARCHAR") + "xx").alias("n"),
    )
    assert out.to_pylist() == [
        {"a": 51, "b": 3, "r": 0.25, "n": 3},
        {"a": 101, "b": 6, "r": 0.25, "n": 3},
    ]


def test_nested_calls_lift_innermost_first():
    out = reviews().select(u.shout(u.shout(col("review"))).alias("twice"))
    assert out.to_pylist()[0] == {"twice": "THIS PRODUCT IS AMAZING!!"}
    assert out.explain(optimized=True).count("Udf shout") == 2


def test_a_filter_on_input_columns_runs_before_the_model():
    seen: list[object] = []
    unsubscribe = subscribe(seen.append)
    try:
        rel = vane.range(100).with_column("s", u.scaled(col("id"), 2)).filter(col("id") < 10)
        assert rel.count() == 10
    finally:
        unsubscribe()
    assert sum(e.rows_in for e in seen if isinstance(e, StageFinished)) == 10


def test_a_udf_in_a_filter_decides_the_rows():
    out = reviews().filter(u.SentimentClassifier()(col("review")) == "POSITIVE")
    assert out.to_pylist() == [{"id": 1, "review": REVIEWS[0]}]


def test_projection_pushdown_matches_names_case_insensitively():
    rel = vane.from_pydict({"id": [1, 2], "text": ["a", "b"], "blob": [b"x", b"y"]})
    out = rel.with_column("loud", u.shout(col("text"))).select("ID", "loud")
    assert out.to_pylist() == [{"id": 1, "loud": "A!"}, {"id": 2, "loud": "B!"}]
    assert "Select id, text" in out.explain(optimized=True)


def test_on_error_null_nulls_only_the_output_and_keeps_the_row():
    rel = vane.from_pydict({"id": [1, 2, 3, 4], "error": ["a", "b", "c", "d"]})
    with pytest.warns(UserWarning, match="three is unlucky"):
        rows = rel.with_column("y", u.fragile(col("id"))).to_pylist()
    assert rows == [
        {"id": 1, "error": "a", "y": 10},
        {"id": 2, "error": "b", "y": 20},
        {"id": 3, "error": "c", "y": None},
        {"id": 4, "error": "d", "y": 40},
    ]
    with pytest.warns(UserWarning, match="skipped 1 row"):
        kept = rel.with_column("y", u.fragile_skip(col("id"))).to_pylist()
    assert [r["id"] for r in kept] == [1, 2, 4]


# ---- errors, each when the plan is built unless it needs the data ------------------------


def test_an_undecorated_function_is_not_an_expression():
    def plain(text: str) -> str:
        return text

    with pytest.raises(PlanError, match=r"got the function 'plain'.*@vane.func"):
        reviews().select(plain)


def test_wrong_arguments_fail_when_the_call_is_written():
    with pytest.raises(PlanError, match="wrong arguments"):
        u.shout(col("review"), col("id"))
    with pytest.raises(PlanError, match="wrong arguments"):
        u.scaled(col("id"), nope=1)
    with pytest.raises(PlanError, match="at least one column"):
        u.shout("a literal")
    with pytest.raises(ConfigurationError, match="constructor arguments do not fit"):
        u.CountedInProcess()
    with pytest.raises(PlanError, match="there is no column 'nope'"):
        reviews().select(u.shout(col("nope")))


def test_a_udf_in_aggregate_or_group_by_is_an_error():
    with pytest.raises(PlanError, match="cannot run inside aggregate"):
        reviews().aggregate(u.length(col("review")).sum())
    with pytest.raises(PlanError, match="cannot run inside aggregate"):
        reviews().aggregate("count(*)", group_by=u.shout(col("review")))


def test_a_value_that_does_not_fit_the_return_type_names_the_row():
    with pytest.raises(SchemaMismatchError, match=r"BIGINT.*row 2 is 'two'"):
        vane.range(4).select(u.says_text_for_two(col("id"))).to_arrow()


def test_a_batch_function_returning_the_wrong_length_is_an_error():
    with pytest.raises(SchemaMismatchError, match="returned 2 values for a batch of 3 rows"):
        vane.range(3).select(u.one_short(col("id"))).to_arrow()


def test_a_return_type_is_needed():
    with pytest.raises(SchemaError, match="has no return type"):

        @vane.func
        def untyped(x):  # type: ignore[no-untyped-def]
            return x

    with pytest.raises(SchemaError, match="cannot tell the column type"):

        @vane.func
        def odd(x: int) -> set[int]:
            return {x}


def test_max_concurrency_of_a_function_is_a_number_of_rows():
    for wrong in ((1, 2), 0, True, "4"):
        with pytest.raises(ConfigurationError, match="rows of an async def one actor runs"):
            vane.func(max_concurrency=wrong)


def test_decorators_reject_the_wrong_kind_of_target():
    with pytest.raises(ConfigurationError, match="decorates a function"):
        vane.func(u.SentimentClassifier.cls)
    with pytest.raises(ConfigurationError, match="decorates a class"):
        vane.cls(u.shout.target)
    with pytest.raises(ConfigurationError, match="on_error"):
        vane.func(on_error="ignore")


def test_without_warnings_on_the_happy_path():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reviews().with_column("s", u.shout(col("review"))).count() == 3


# ---- called from SQL ------------------------------------------------------------------------


@pytest.fixture
def attached():
    names = []

    def attach(name: str, udf: object) -> None:
        vane.attach_function(name, udf)
        names.append(name)

    yield attach
    for name in names:
        vane.detach_function(name)


def test_attached_udfs_run_from_sql_in_their_actors(attached):
    attached("shout", u.shout)
    attached("sentiment", u.SentimentClassifier())
    r = reviews()
    query = (
        "SELECT r.id, SHOUT( r.review ) AS loud, sentiment(review) AS mood FROM r "
        "WHERE shout(shout(review || '?')) LIKE '%?!!' ORDER BY id DESC"
    )
    out = vane.sql(query, r=r)
    assert out.explain().splitlines()[0].startswith("Sql [r] SELECT r.id, SHOUT( r.review )")
    assert "Udf shout(review)" in out.explain(optimized=True)
    assert out.to_pylist() == [
        {"id": 3, "loud": REVIEWS[2].upper() + "!", "mood": "NEGATIVE"},
        {"id": 2, "loud": REVIEWS[1].upper() + "!", "mood": "NEGATIVE"},
        {"id": 1, "loud": REVIEWS[0].upper() + "!", "mood": "POSITIVE"},
    ]
    counts = r.sql("SELECT sentiment(review) AS m, count(*) AS n FROM rel GROUP BY 1 ORDER BY 1")
    assert counts.to_pylist() == [{"m": "NEGATIVE", "n": 2}, {"m": "POSITIVE", "n": 1}]


def test_a_star_over_a_table_with_udf_calls_shows_no_hidden_columns(attached):
    attached("shout", u.shout)
    tags = vane.from_pydict({"id": [1, 2], "tag": ["x", "y"]})
    out = vane.sql("SELECT *, shout(tag) AS loud FROM r JOIN t USING (id)", r=reviews(), t=tags)
    assert out.columns == ["id", "review", "tag", "loud"]
    assert [row["loud"] for row in out.to_pylist()] == ["X!", "Y!"]


def test_sql_calls_that_cannot_be_placed_are_plan_errors(attached):
    attached("shout", u.shout)
    tags = vane.from_pydict({"id": [1, 2], "tag": ["x", "y"]})
    with pytest.raises(PlanError, match="exactly one of the tables"):
        vane.sql("SELECT shout(tag || review) FROM r JOIN t USING (id)", r=reviews(), t=tags)
    with pytest.raises(PlanError, match="which the tables r, t all have; qualify it"):
        vane.sql("SELECT shout(id) FROM r JOIN t USING (id)", r=reviews(), t=tags)
    with pytest.raises(PlanError, match="none of the tables"):
        vane.sql("SELECT shout(nope) FROM r", r=reviews())
    with pytest.raises(PlanError, match="wrong arguments"):
        vane.sql("SELECT shout(review, id) FROM r", r=reviews())


def test_attaching_checks_names_and_a_built_plan_survives_detaching():
    with pytest.raises(ConfigurationError, match="already has a function named 'lower'"):
        vane.attach_function("lower", u.shout)
    with pytest.raises(ConfigurationError, match="plain SQL identifier"):
        vane.attach_function("no spaces", u.shout)
    with pytest.raises(ConfigurationError, match="not a column UDF"):
        vane.attach_function("plain", len)
    vane.attach_function("yell", u.shout)
    plan = vane.sql("SELECT yell(review) AS y FROM r", r=reviews())
    vane.detach_function("yell")
    assert plan.count() == 3
    with pytest.raises(PlanError, match="yell"):
        vane.sql("SELECT yell(review) AS y FROM r", r=reviews())
    with pytest.raises(ConfigurationError, match="no function named 'yell'"):
        vane.detach_function("yell")


# ---- generator functions: several values per row ----------------------------------------


def test_a_generator_repeats_the_row_once_per_value_and_keeps_empty_rows():
    rel = vane.from_pydict({"id": [1, 2, 3], "text": ["a b", "", "c d e"]})
    rows = rel.with_column("word", u.words(col("text"))).to_pylist()
    assert [(r["id"], r["word"]) for r in rows] == [
        (1, "a"),
        (1, "b"),
        (2, None),  # nothing yielded: the row stays, as in Daft
        (3, "c"),
        (3, "d"),
        (3, "e"),
    ]
    assert all(r["text"] == {1: "a b", 2: "", 3: "c d e"}[r["id"]] for r in rows)
    selected = rel.select("id", u.words(col("text")).alias("w")).filter("w IS NOT NULL")
    assert selected.to_pylist()[:2] == [{"id": 1, "w": "a"}, {"id": 1, "w": "b"}]


def test_generators_async_in_processes_struct_valued_and_failing_rows():
    counts = vane.from_pydict({"n": [2, 0, 3, 1]})
    with pytest.warns(UserWarning, match="three is unlucky"):
        rows = counts.with_column("k", u.countdown(col("n"))).to_pylist()
    # the failing row is kept, once, with a null (on_error="null")
    assert [(r["n"], r["k"]) for r in rows] == [(2, 2), (2, 1), (0, None), (3, None), (1, 1)]
    rows = counts.with_column("i", u.slow_range(col("n"))).to_pylist()
    assert [(r["n"], r["i"]) for r in rows] == [
        (2, 0),
        (2, 1),
        (0, None),
        (3, 0),
        (3, 1),
        (3, 2),
        (1, 0),
    ]
    texts = vane.from_pydict({"text": ["to be or", "not"]})
    rows = texts.with_column("s", u.spans(col("text"))).to_pylist()  # use_process=True
    assert [r["s"] for r in rows] == [
        {"word": "to", "start": 0},
        {"word": "be", "start": 3},
        {"word": "or", "start": 6},
        {"word": "not", "start": 0},
    ]


def test_generator_calls_that_cannot_be_placed_are_plan_errors():
    rel = vane.from_pydict({"text": ["a b"]})
    with pytest.raises(PlanError, match=r"generator UDF.*with_column\(\) first"):
        rel.filter(u.words(col("text")) == "a").to_arrow()
    with pytest.raises(PlanError, match="two generator UDFs"):
        rel.select(u.words(col("text")).alias("a"), u.spans(col("text")).alias("b")).to_arrow()
    with pytest.raises(PlanError, match="not inside another expression"):
        rel.select(u.words(col("text")) + "!").to_arrow()
    # one after the other: every value of one with every value of the other
    rows = rel.with_column("a", u.words(col("text"))).with_column("b", u.words(col("text")))
    assert [(r["a"], r["b"]) for r in rows.to_pylist()] == [
        ("a", "a"),
        ("a", "b"),
        ("b", "a"),
        ("b", "b"),
    ]


def test_a_value_that_does_not_fit_names_the_call_and_the_input_row_not_hidden_columns():
    rel = vane.range(6)
    with pytest.raises(SchemaMismatchError) as info:
        rel.with_column("y", u.says_text_for_two(col("id") + 1)).to_arrow()
    message = str(info.value)
    assert "says_text_for_two((id + 1)) returned values that cannot be stored as BIGINT" in message
    assert "input row 1" in message and "__vane" not in message
    with pytest.raises(SchemaMismatchError) as info:
        rel.with_column("y", u.yields_text_for_two(col("id"))).to_arrow()
    assert "yields_text_for_two(id) yielded" in str(info.value)
    assert "input row 2" in str(info.value) and "__vane" not in str(info.value)


def test_batch_timeout_s_applies_to_column_udfs():
    with pytest.warns(UserWarning, match="batch_timeout_s=0.5"):
        rows = vane.range(4).with_column("v", u.stalls_on_two(col("id"))).to_pylist()
    assert [r["v"] for r in rows] == [0, 1, None, 3]  # only the stalled row, as a null


# ---- on_error="null" with an error column the user names --------------------------------------


def strict_inverse(x: int) -> float:
    if x == 0:
        raise ZeroDivisionError("no inverse of 0")
    return 1 / x


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_column_udf_keeps_each_failing_rows_error_in_the_column_named(backend):
    fn = vane.func(on_error="null", error_column="why", use_process=backend != "thread")(
        strict_inverse
    )
    rel = vane.from_pydict({"id": [0, 1, 2], "key": ["a", "b", "c"]})
    with pytest.warns(UserWarning, match=r"kept 1 failing row as nulls, .*column 'why'"):
        rows = rel.with_column("inv", fn(col("id"))).to_pylist()
    assert rows == [
        {"id": 0, "key": "a", "inv": None, "why": "ZeroDivisionError: no inverse of 0"},
        {"id": 1, "key": "b", "inv": 1.0, "why": None},
        {"id": 2, "key": "c", "inv": 0.5, "why": None},
    ]
    with pytest.warns(UserWarning, match="column 'why'"):
        selected = rel.select("key", fn(col("id")).alias("inv")).to_pylist()
    assert selected[0] == {"key": "a", "inv": None, "why": "ZeroDivisionError: no inverse of 0"}


def test_without_an_error_column_the_warning_says_how_to_keep_one():
    fn = vane.func(on_error="null")(strict_inverse)
    rel = vane.from_pydict({"id": [0, 1]})
    out = rel.with_column("inv", fn(col("id")))
    assert out.columns == ["id", "inv"]
    with pytest.warns(UserWarning, match=r"pass error_column='error' to the UDF") as caught:
        out.to_arrow()
    assert "__vane" not in str(caught[0].message)


def test_an_error_column_is_checked_where_it_is_written():
    with pytest.raises(ConfigurationError, match=r"error_column='why'.*on_error='null' too"):
        vane.func(error_column="why")(strict_inverse)
    fn = vane.func(on_error="null", error_column="key")(strict_inverse)
    rel = vane.from_pydict({"id": [0, 1], "key": ["a", "b"]})
    with pytest.raises(PlanError, match=r"error_column='key'.*already has a column"):
        rel.with_column("inv", fn(col("id")))
    with pytest.raises(PlanError, match=r"filter\(\).*with_column\(\) first"):
        rel.filter(fn(col("id")) > 0)
    kept = rel.with_column(
        "inv", vane.func(on_error="null", error_column="why")(strict_inverse)(col("id"))
    )
    assert kept.columns == ["id", "key", "inv", "why"]
    assert kept.schema.field("why").type == pa.string()
    with pytest.raises(ConfigurationError, match=r"error_column='why'.*on_error is 'skip'"):
        rel.map_batches(lambda b: b, schema=rel.schema, on_error="skip", error_column="why")
