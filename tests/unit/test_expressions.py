"""The expression IR: building, naming, compiling to SQL, and verbs that take expressions and
SQL strings side by side."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

import vane
from vane import col, lit, sql_expr
from vane.errors import PlanError


@pytest.fixture
def people() -> vane.Relation:
    return vane.from_pydict(
        {
            "id": [1, 2, 3, 4],
            "name": ["ann", "bob", None, "dee"],
            "score": [0.5, 0.9, 0.1, None],
            "team": ["a", "b", "a", "b"],
        }
    )


def test_operators_compute_what_python_says(people):
    out = people.select(
        "id",
        (col("id") * 2 + 1).alias("odd"),
        (col("id") / 2).alias("half"),
        (col("id") // 2).alias("floor"),
        (col("id") % 2).alias("mod"),
        (-col("id")).alias("neg"),
        (col("id") ** 2).alias("sq"),
        (10 - col("id")).alias("rsub"),
        ((col("id") > 1) & (col("id") <= 3)).alias("mid"),
        ((col("id") == 1) | ~(col("id") != 4)).alias("ends"),
        col("score").is_null().alias("no_score"),
        col("score").fill_null(0.0).alias("filled"),
        col("id").isin([2, 4]).alias("even"),
        col("id").cast("VARCHAR").alias("text"),
        (col("name") + "!").alias("loud"),
    )
    rows = out.to_pylist()
    assert rows[1] == {
        "id": 2,
        "odd": 5,
        "half": 1.0,
        "floor": 1,
        "mod": 0,
        "neg": -2,
        "sq": 4.0,
        "rsub": 8,
        "mid": True,
        "ends": False,
        "no_score": False,
        "filled": 0.9,
        "even": True,
        "text": "2",
        "loud": "bob!",
    }
    assert [r["ends"] for r in rows] == [True, False, False, True]
    assert rows[3]["filled"] == 0.0 and rows[2]["loud"] is None


def test_an_expression_is_named_after_its_alias_or_its_first_column(people):
    out = people.select(col("id") + 1, (lit(2) * col("score")).alias("s2"), lit(7))
    assert out.columns == ["id", "s2", "literal"]
    assert (col("score") * col("id")).output_name == "score"


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        -3,
        2**62,
        1.5,
        "it's",
        b"\x00\xff",
        decimal.Decimal("1.25"),
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 13, 45, 1, 250),
        dt.time(13, 45),
        [1, 2, 3],
        {"a": 1, "b": "x"},
    ],
)
def test_literals_round_trip(value):
    (row,) = vane.range(1).select(lit(value).alias("v")).to_pylist()
    assert row["v"] == value


def test_column_names_with_any_characters_work_everywhere():
    rel = vane.from_pydict({'a"b': [2, 1, 2], "sp ace": ["x", "y", "x"], "ID": [1, 2, 3]})
    assert rel.select("sp ace").columns == ["sp ace"]
    assert rel.order_by('a"b').to_pylist()[0]['a"b'] == 1
    assert rel.order_by('a"b', descending=True).to_pylist()[0]['a"b'] == 2
    grouped = rel.aggregate("count(*) AS n", group_by="sp ace").order_by("sp ace")
    assert grouped.to_pylist() == [{"sp ace": "x", "n": 2}, {"sp ace": "y", "n": 1}]
    assert rel.filter(col("sp ace") == "y").select(col('a"b')).to_pylist() == [{'a"b': 1}]
    assert rel.with_column("sp ace", col("sp ace") + "!").columns == ['a"b', "sp ace", "ID"]


def test_group_keys_are_named_as_written_and_take_an_alias():
    rel = vane.sql(
        "SELECT range AS id, TIMESTAMP '2024-01-01 00:00:00' + to_hours(range % 3) AS ts "
        "FROM range(6)"
    )
    assert rel.aggregate("count(*) AS n", group_by="hour(ts)").columns == ["hour(ts)", "n"]
    by_alias = rel.aggregate("count(*) AS n", group_by="hour(ts) AS hr").order_by("hr")
    assert by_alias.to_pylist() == [{"hr": 0, "n": 2}, {"hr": 1, "n": 2}, {"hr": 2, "n": 2}]
    by_expr = rel.aggregate(col("id").sum().alias("total"), group_by=(col("id") % 2).alias("p"))
    assert sorted(by_expr.to_pylist(), key=lambda r: r["p"]) == [
        {"p": 0, "total": 6},
        {"p": 1, "total": 9},
    ]
    with pytest.raises(PlanError, match="does not parse") as info:
        rel.aggregate("count(*)", group_by="hour(ts) AS")
    assert "_vane" not in str(info.value) and "SELECT" not in str(info.value)


def test_order_by_keys_sql_and_expressions(people):
    assert [r["id"] for r in people.order_by("team DESC", "score NULLS FIRST").to_pylist()] == [
        4,
        2,
        3,
        1,
    ]
    assert [r["id"] for r in people.order_by(col("score"), descending=True).to_pylist()] == [
        2,
        1,
        3,
        4,
    ]
    flags = people.order_by("team", col("id"), descending=[False, True]).to_pylist()
    assert [r["id"] for r in flags] == [3, 1, 4, 2]
    with pytest.raises(PlanError, match="one sort key"):
        people.order_by("team, id")
    with pytest.raises(PlanError, match="one flag per key"):
        people.order_by("team", descending=[True, False])


def test_bad_expressions_fail_when_written_naming_the_column(people):
    with pytest.raises(PlanError, match="there is no column 'nope'"):
        people.filter(col("nope") > 1)
    with pytest.raises(PlanError, match="no truth value"):
        people.filter(col("id") > 1 and col("id") < 3)
    with pytest.raises(PlanError, match="not one SQL expression"):
        people.select("id, name")
    with pytest.raises(PlanError, match="no column named 'nope'"):
        people["nope"]
    with pytest.raises(PlanError, match="cannot be SQL literals"):
        lit(object())


def test_sql_text_columns_come_from_duckdbs_parser():
    assert sql_expr('lower(Name) || "sp ace" AS x').columns() == {"Name", "sp ace"}
    assert sql_expr("* EXCLUDE (a)").columns() is None
    assert sql_expr("(SELECT 1)").columns() is None
    assert sql_expr("'a -- not a comment' || b").columns() == {"b"}
    assert (col("a") + sql_expr("b * 2")).columns() == {"a", "b"}


def test_a_relation_is_indexable_by_column_name(people):
    assert people.select(people["name"]).columns == ["name"]


# ---- building a plan has no side effects --------------------------------------------------


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("CREATE TABLE side_effect AS SELECT 1 AS a", "CREATE"),
        ("SET threads = 1", "SET"),
        ("ATTACH 'side_effect.db' AS side", "ATTACH"),
        ("COPY (SELECT 1) TO 'side_effect.csv'", "COPY"),
        ("INSTALL httpfs", "LOAD"),
        ("DROP TABLE IF EXISTS anything", "DROP"),
    ],
)
def test_sql_that_would_change_the_database_is_refused_and_runs_nothing(
    query, kind, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    threads = vane.sql("SELECT current_setting('threads') AS t").to_pylist()
    with pytest.raises(PlanError, match=f"{kind} statements are not queries"):
        vane.sql(query)
    with pytest.raises(PlanError, match="not queries"):
        vane.range(1).sql(query)
    assert list(tmp_path.iterdir()) == []
    assert vane.sql("SELECT current_setting('threads') AS t").to_pylist() == threads
    tables = vane.sql("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'side_effect'")
    assert tables.to_pylist() == [{"n": 0}]


def test_several_statements_are_refused_not_silently_cut():
    with pytest.raises(PlanError, match="2 statements"):
        vane.sql("SELECT 1 AS a; SELECT 2 AS b")


def test_sql_steps_leave_no_views_behind():
    from vane import _engine

    def views() -> int:
        with _engine.scratch() as cursor:
            return int(cursor.sql("SELECT count(*) FROM duckdb_views()").fetchall()[0][0])

    rel = vane.range(3)
    vane.sql("SELECT * FROM r", r=rel)
    before = views()
    for _ in range(50):
        vane.sql("SELECT * FROM a JOIN b USING (id)", a=rel, b=rel)
    assert views() == before


def test_a_query_with_its_own_with_clause_and_comments_gets_the_inputs_too():
    rel = vane.range(4)
    query = (
        "-- leading comment\n"
        "with RECURSIVE evens AS (SELECT id FROM r WHERE id % 2 = 0) SELECT * FROM evens"
    )
    assert vane.sql(query, r=rel).to_pylist() == [{"id": 0}, {"id": 2}]


def test_binder_messages_drop_the_list_of_candidate_overloads():
    with pytest.raises(PlanError) as info:
        vane.range(3).select(col("id") + pa.scalar(1).as_py() + sql_expr("'x'::BLOB"))
    assert "candidate functions omitted" in str(info.value)
    assert len(str(info.value)) < 700


def _every_node(expr):
    return list(expr.walk())


def test_the_ir_holds_plain_data_not_duckdb_text(people):
    # Operators are enums and casts hold Arrow types: a backend other than DuckDB could compile
    # them, and nothing of DuckDB's spelling reaches the plan but raw SQL the user wrote.
    from vane.ir.expr import BinaryOp, BinaryOperator, Cast, UnaryOp, UnaryOperator

    built = [
        (col("id") + 1) * 2 - col("score") / 4 // 1 % 3,
        col("id") ** 2,
        (col("name") + "!").alias("loud"),
        (col("id") > 1) & ~(col("score") <= 0.5) | (col("id") == 2) | (col("id") != 3),
        col("id") >= 1,
        col("id") < 9,
        -col("id"),
        col("name").is_null(),
        col("name").is_not_null(),
        col("id").cast("SMALLINT"),
        col("id").cast(pa.float32()),
    ]
    for expr in built:
        for node in _every_node(expr):
            if isinstance(node, BinaryOp):
                assert isinstance(node.op, BinaryOperator)
            if isinstance(node, UnaryOp):
                assert isinstance(node.op, UnaryOperator)
            if isinstance(node, Cast):
                assert isinstance(node.to, pa.DataType)
    assert people.select(col("id").cast("SMALLINT").alias("s")).schema.field("s").type == pa.int16()
    assert str(col("id").cast(pa.float32())) == "CAST(id AS FLOAT)"


def test_join_keys_are_expressions_each_on_its_own_side():
    users = vane.from_pydict({"id": [1, 2, 3], "name": ["ann", "bob", "cy"]})
    orders = vane.from_pydict({"id": [1, 1, 4], "amount": [10, 20, 30]})
    # A bare name that both sides have is each side's own column, not an ambiguous reference.
    same = users.join(orders, left_on="id", right_on="id").order_by("amount")
    assert same.select("name", "amount").to_pylist() == [
        {"name": "ann", "amount": 10},
        {"name": "ann", "amount": 20},
    ]
    shifted = users.join(orders, left_on=col("id") + 3, right_on=[col("id")], how="inner")
    assert shifted.select("name", "amount").to_pylist() == [{"name": "ann", "amount": 30}]
    assert "Join inner on (id + 3) = id" in shifted.explain()
    # Raw SQL that names the sides, as before
    assert users.join(orders, left_on="l.id", right_on="r.id").count() == 2
    with pytest.raises(PlanError, match="join"):
        users.join(orders, left_on=[1], right_on="id")  # type: ignore[list-item]
