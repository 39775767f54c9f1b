"""Each Relation verb and action, checked against DuckDB computing the same thing directly."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

import vane
from vane.errors import ExecutionError, PlanError
from vane.testing import assert_table_equal

PEOPLE = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
        "name": ["ann", "bob", "cy", "dee", "eve", None],
        "team": ["a", "b", "a", "c", "b", "a"],
        "score": [0.5, 0.9, 0.1, 0.7, None, 0.3],
    }
)
TEAMS = pa.table({"team": ["a", "b", "d"], "lead": ["Ada", "Bo", "Dan"]})


@pytest.fixture
def people():
    return vane.from_arrow(PEOPLE)


@pytest.fixture
def teams():
    return vane.from_arrow(TEAMS)


def duck(query: str) -> pa.Table:
    con = duckdb.connect()
    con.register("people", PEOPLE)
    con.register("teams", TEAMS)
    return con.sql(query).to_arrow_table()


def test_select(people):
    assert_table_equal(
        people.select("id", "score * 2 AS double_score"),
        duck("SELECT id, score * 2 AS double_score FROM people"),
    )


def test_filter(people):
    assert_table_equal(people.filter("score > 0.4"), duck("SELECT * FROM people WHERE score > 0.4"))


def test_with_column_adds_and_replaces_in_place(people):
    added = people.with_column("upper", "upper(name)")
    assert added.columns == ["id", "name", "team", "score", "upper"]
    assert_table_equal(added, duck("SELECT *, upper(name) AS upper FROM people"))
    replaced = people.with_column("score", "coalesce(score, 0)")
    assert replaced.columns == ["id", "name", "team", "score"]
    assert_table_equal(replaced, duck("SELECT * REPLACE (coalesce(score, 0) AS score) FROM people"))


def test_drop_and_rename(people):
    assert_table_equal(people.drop("name", "team"), duck("SELECT id, score FROM people"))
    renamed = people.rename({"name": "who", "score": "s"})
    assert renamed.columns == ["id", "who", "team", "s"]
    assert_table_equal(renamed, duck("SELECT id, name AS who, team, score AS s FROM people"))


def test_limit_and_offset_keep_order(people):
    assert_table_equal(people.limit(2), duck("SELECT * FROM people LIMIT 2"))
    assert_table_equal(people.limit(2, offset=3), duck("SELECT * FROM people LIMIT 2 OFFSET 3"))


def test_order_by(people):
    assert_table_equal(
        people.order_by("team DESC", "score NULLS FIRST"),
        duck("SELECT * FROM people ORDER BY team DESC, score NULLS FIRST"),
    )


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_join_on_key(people, teams, how):
    sql_how = {"outer": "FULL OUTER"}.get(how, how.upper())
    expected = duck(
        f"SELECT coalesce(p.team, t.team) AS team_key, p.id, p.name, p.score, t.lead "
        f"FROM people p {sql_how} JOIN teams t ON p.team = t.team"
    )
    got = people.join(teams, on="team", how=how)
    assert got.columns == ["id", "name", "team", "score", "lead"]
    got_rows = sorted(
        ((r["team"], r["id"], r["name"], r["score"], r["lead"]) for r in got.to_pylist()),
        key=repr,
    )
    expected_rows = sorted(
        ((r["team_key"], r["id"], r["name"], r["score"], r["lead"]) for r in expected.to_pylist()),
        key=repr,
    )
    assert got_rows == expected_rows


@pytest.mark.parametrize("how", ["semi", "anti"])
def test_semi_and_anti_join(people, teams, how):
    got = people.join(teams, on="team", how=how)
    assert got.columns == people.columns
    expected = duck(f"SELECT * FROM people {how.upper()} JOIN teams USING (team)")
    assert_table_equal(got, expected, check_order=False)


def test_join_left_on_right_on_suffixes_clashing_columns(people):
    other = vane.from_pydict({"pid": [1, 2, 9], "name": ["x", "y", "z"]})
    got = people.join(other, left_on="id", right_on="pid")
    assert got.columns == ["id", "name", "team", "score", "pid", "name_right"]
    assert_table_equal(
        got,
        duck(
            "SELECT p.*, o.pid, o.name AS name_right FROM people p JOIN "
            "(SELECT * FROM (VALUES (1::BIGINT, 'x'), (2, 'y'), (9, 'z')) v(pid, name)) o "
            "ON p.id = o.pid"
        ),
        check_order=False,
    )


def test_aggregate_with_and_without_groups(people):
    assert_table_equal(
        people.aggregate("count(*) AS n", "avg(score) AS mean", group_by="team"),
        duck("SELECT team, count(*) AS n, avg(score) AS mean FROM people GROUP BY team"),
        check_order=False,
    )
    assert people.aggregate("sum(id) AS total").to_pylist() == [{"total": 21}]


def test_distinct_and_union(people):
    teams_col = people.select("team")
    assert_table_equal(
        teams_col.distinct(), duck("SELECT DISTINCT team FROM people"), check_order=False
    )
    both = people.union(people)
    assert both.count() == 12
    assert_table_equal(
        both, duck("SELECT * FROM people UNION ALL SELECT * FROM people"), check_order=False
    )


def test_union_matches_columns_by_name_not_position():
    a = vane.from_pydict({"x": [1], "y": ["a"]})
    b = vane.from_pydict({"y": ["b"], "x": [2]})
    assert a.union(b).to_pylist() == [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]
    with pytest.raises(PlanError, match=r"Only on the left: \['y'\]"):
        a.union(vane.from_pydict({"x": [1], "z": [2]}))


def test_relation_sql(people):
    got = people.sql("SELECT team, max(score) AS best FROM rel GROUP BY team")
    assert_table_equal(
        got, duck("SELECT team, max(score) AS best FROM people GROUP BY team"), check_order=False
    )
    named = people.sql("WITH t AS (SELECT * FROM p WHERE id > 4) SELECT id FROM t", name="p")
    assert named.to_pylist() == [{"id": 5}, {"id": 6}]


def test_module_sql_with_named_relations(people, teams):
    got = vane.sql(
        "SELECT p.id, t.lead FROM p JOIN t USING (team) ORDER BY p.id", p=people, t=teams
    )
    expected = duck("SELECT p.id, t.lead FROM people p JOIN teams t USING (team) ORDER BY p.id")
    assert_table_equal(got, expected)
    assert vane.sql("SELECT 42 AS answer").to_pylist() == [{"answer": 42}]


def test_nested_sql_steps_with_the_same_name_do_not_collide():
    a = vane.range(5).sql("SELECT id * 10 AS id FROM rel")
    b = vane.range(3)
    got = vane.sql("SELECT count(*) AS n FROM rel", rel=a.sql("SELECT * FROM rel WHERE id > 0"))
    assert got.to_pylist() == [{"n": 4}]
    assert vane.sql("SELECT * FROM a UNION ALL SELECT * FROM b", a=a, b=b).count() == 8


def test_schema_and_columns_without_running(people):
    rel = people.select("id", "[score, score]::FLOAT[2] AS v", "{'a': name} AS s")
    assert rel.columns == ["id", "v", "s"]
    assert rel.schema.field("v").type == pa.list_(pa.float32(), 2)
    assert pa.types.is_struct(rel.schema.field("s").type)


def test_schema_comes_from_metadata_not_data(tmp_path):
    # A query that would fail on its first row still has a schema: no row is read for it.
    rel = vane.range(10).with_column("bad", "CASE WHEN id >= 0 THEN error('boom') END::INTEGER")
    assert rel.schema.field("bad").type == pa.int32()
    with pytest.raises(ExecutionError, match="boom"):
        rel.to_arrow()


def test_explain_names_every_step(people, teams):
    rel = people.filter("score > 0.2").join(teams, on="team").select("id", "lead").limit(3)
    assert rel.explain() == (
        "Limit 3\n"
        "  Select id, lead\n"
        "    Join inner on team\n"
        "      Filter score > 0.2\n"
        "        FromArrow rows=6\n"
        "      FromArrow rows=3"
    )


def test_repr_shows_schema_and_plan_without_running():
    rel = vane.range(3).with_column("boom", "error('x')::VARCHAR")
    text = repr(rel)
    assert text.startswith("Relation[id BIGINT, boom VARCHAR]")
    assert "WithColumn boom" in text


def test_actions(people):
    assert people.count() == 6
    assert people.to_arrow().equals(PEOPLE)
    assert people.to_pylist() == PEOPLE.to_pylist()
    df = people.to_pandas()
    assert list(df.columns) == people.columns and len(df) == 6
    assert next(iter(people)) == {"id": 1, "name": "ann", "team": "a", "score": 0.5}


def test_iter_batches_streams_in_order():
    batches = list(vane.range(10_000).iter_batches(batch_size=3000))
    assert [b.num_rows for b in batches] == [3000, 3000, 3000, 1000]
    assert pa.Table.from_batches(batches).column("id").to_pylist() == list(range(10_000))


def test_iter_batches_is_lazy_and_can_stop_early():
    stream = vane.range(10**12).iter_batches(batch_size=1000)  # far too big to materialize
    first = next(stream)
    assert first.num_rows == 1000
    stream.close()


def test_show(people, capsys):
    people.show(2)
    out = capsys.readouterr().out
    assert "ann" in out and "bob" in out and "cy" not in out


def test_relations_are_immutable(people):
    filtered = people.filter("id > 3")
    assert people.count() == 6 and filtered.count() == 3
    with pytest.raises(AttributeError):
        people.x = 1  # type: ignore[attr-defined]
