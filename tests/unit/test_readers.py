"""Reading files: exactly the files listed (glob characters in names included), folders whose
files differ combined by name or refused with the files named, and the reader options users of
pandas, Daft and Ray Data bring."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane.errors import (
    ConfigurationError,
    MissingDependencyError,
    PlanError,
    SchemaError,
    SourceError,
)

FORMATS = ["parquet", "csv", "json"]


def write(rel: vane.Relation, fmt: str, path) -> None:  # type: ignore[no-untyped-def]
    getattr(rel, f"write_{fmt}")(str(path))


def read(fmt: str, path, **options):  # type: ignore[no-untyped-def]
    return getattr(vane, f"read_{fmt}")(path, **options)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("odd", "plain"), [("x[1]", "x1"), ("a*", "abc"), ("q?", "qq")])
def test_files_with_glob_characters_are_read_literally(tmp_path, fmt, odd, plain):
    suffix = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl"}[fmt]
    write(vane.range(1), fmt, tmp_path / f"{odd}{suffix}")
    write(vane.range(10), fmt, tmp_path / f"{plain}{suffix}")
    assert read(fmt, tmp_path).count() == 11  # the folder: each file once
    assert read(fmt, tmp_path / f"{odd}{suffix}").count() == 1  # the file itself, not a glob
    assert read(fmt, [tmp_path / f"{odd}{suffix}", tmp_path / f"{plain}{suffix}"]).count() == 11


def test_what_vane_writes_under_odd_names_reads_back(tmp_path):
    for name in ("d[1]", "e*", "f?x", "g]"):
        vane.range(3).write_parquet(tmp_path / name / "out", partition_by=None)
        assert vane.read_parquet(tmp_path / name / "out").count() == 3
        assert vane.read_parquet(tmp_path / name).count() == 3


def test_the_filename_column_names_the_real_file(tmp_path):
    vane.range(2).write_parquet(tmp_path / "x[1].parquet")
    rows = vane.read_parquet(tmp_path, filename=True).to_pylist()
    assert {r["filename"] for r in rows} == {str(tmp_path / "x[1].parquet")}
    named = vane.read_parquet(tmp_path, filename="source").columns
    assert named == ["id", "source"]


# ---- folders whose files differ ----------------------------------------------------------------


def _two_months(tmp_path, reverse=False):  # type: ignore[no-untyped-def]
    first = pa.table({"id": pa.array([1], pa.int32()), "text": ["a"]})
    second = pa.table({"id": pa.array([2], pa.int64()), "text": ["b"], "lang": ["en"]})
    names = ("2024-01.parquet", "2024-02.parquet")
    for name, table in zip(names, (second, first) if reverse else (first, second), strict=True):
        pq.write_table(table, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("reverse", [False, True])
def test_parquet_files_are_combined_by_name_with_widened_types(tmp_path, reverse):
    rel = vane.read_parquet(_two_months(tmp_path, reverse))
    assert sorted(rel.columns) == ["id", "lang", "text"]
    assert rel.schema.field("id").type == pa.int64()
    rows = {r["id"]: r for r in rel.to_pylist()}
    assert rows[2]["lang"] == ("en" if not reverse else None) or rows[1]["lang"] is None
    assert sum(r["lang"] is None for r in rows.values()) == 1


def test_types_that_cannot_combine_are_an_error_naming_the_files(tmp_path):
    pq.write_table(pa.table({"id": [1], "v": [1.5]}), tmp_path / "numbers.parquet")
    pq.write_table(pa.table({"id": [2], "v": ["x"]}), tmp_path / "words.parquet")
    with pytest.raises(SchemaError, match=r"column 'v'.*numbers.parquet.*words.parquet"):
        vane.read_parquet(tmp_path)


def test_csv_files_with_different_columns_are_combined_by_name(tmp_path):
    (tmp_path / "a.csv").write_text("id,text\n1,x\n")
    (tmp_path / "b.csv").write_text("text,id,lang\ny,2,en\n")
    rows = vane.read_csv(tmp_path).order_by("id").to_pylist()
    assert rows == [
        {"id": 1, "text": "x", "lang": None},
        {"id": 2, "text": "y", "lang": "en"},
    ]


def test_a_ragged_csv_is_an_error_with_the_fixes(tmp_path):
    (tmp_path / "ragged.csv").write_text("a,b,c\n1,2,3\n4,5\n")
    with pytest.raises(SourceError, match="null_padding=True"):
        vane.read_csv(tmp_path / "ragged.csv")
    padded = vane.read_csv(tmp_path / "ragged.csv", null_padding=True).to_pylist()
    assert padded == [{"a": 1, "b": 2, "c": 3}, {"a": 4, "b": 5, "c": None}]


# ---- options -------------------------------------------------------------------------------------


def test_csv_options(tmp_path):
    path = tmp_path / "scores.csv"
    path.write_text("id;score;day;when\n1;NA;02/01/2024;2024-01-02 13:45\n2;3.5;03/01/2024;bad\n")
    rel = vane.read_csv(
        path,
        delimiter=";",
        null_values=["NA"],
        date_format="%d/%m/%Y",
        types={"when": "VARCHAR"},
    )
    assert rel.schema.field("score").type == pa.float64()
    assert rel.to_pylist()[0] == {
        "id": 1,
        "score": None,
        "day": dt.date(2024, 1, 2),
        "when": "2024-01-02 13:45",
    }
    assert vane.read_csv(path, sep=";", nullstr="NA").schema.field("score").type == pa.float64()
    skipped = vane.read_csv(path, delimiter=";", types={"when": "TIMESTAMP"}, ignore_errors=True)
    assert [r["id"] for r in skipped.to_pylist()] == [1]  # the row whose `when` did not parse
    assert vane.read_csv(path, delimiter=";", columns=["id", "day"]).columns == ["id", "day"]


def test_json_formats_and_columns(tmp_path):
    (tmp_path / "rows.json").write_text('[{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]')
    rel = vane.read_json(tmp_path / "rows.json", format="array", columns=["b"])
    assert rel.to_pylist() == [{"b": "x"}, {"b": "y"}]
    assert vane.read_json(tmp_path / "rows.json", format="auto").count() == 2


def test_json_types_set_those_columns_and_keep_the_rest(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1, "b": "x", "c": [1]}\n{"a": 2, "b": "y"}\n')
    (tmp_path / "b.jsonl").write_text('{"a": 3, "d": 0.5}\n')
    one = vane.read_json(tmp_path / "a.jsonl", types={"a": "DOUBLE"})
    assert repr(one).startswith("Relation[a DOUBLE, b VARCHAR, c BIGINT[]]")
    assert one.to_pylist()[0] == {"a": 1.0, "b": "x", "c": [1]}
    folder = vane.read_json(tmp_path, types={"a": "SMALLINT"}, columns=["a", "b", "d"])
    assert repr(folder).startswith("Relation[a SMALLINT, b VARCHAR, d DOUBLE]")
    assert folder.order_by("a").to_pylist() == [
        {"a": 1, "b": "x", "d": None},
        {"a": 2, "b": "y", "d": None},
        {"a": 3, "b": None, "d": 0.5},
    ]
    (tmp_path / "rows.json").write_text('[{"a": 1, "b": "x"}]')
    array = vane.read_json(tmp_path / "rows.json", format="array", types={"a": "INTEGER"})
    assert array.to_pylist() == [{"a": 1, "b": "x"}]


def test_json_ignore_errors_skips_the_lines_that_do_not_parse(tmp_path):
    lines = ['{"a": 1, "b": "x"}', "not json", '{"a": "zz", "b": "z"}', "{}", '{"a": 5}', "{"]
    (tmp_path / "k=1").mkdir()
    (tmp_path / "k=1" / "rows.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError, match="Malformed JSON"):
        vane.read_json(tmp_path).to_pylist()
    rel = vane.read_json(tmp_path, ignore_errors=True, filename="f", types={"a": "BIGINT"})
    rows = rel.to_pylist()
    # Lines that are not JSON are gone; a value that does not fit its column is null there
    # (as DuckDB reads JSON); `{}` is a row of nulls, as it is without ignore_errors.
    assert [(r["a"], r["b"]) for r in rows] == [(1, "x"), (None, "z"), (None, None), (5, None)]
    assert {(r["k"], r["f"]) for r in rows} == {(1, str(tmp_path / "k=1" / "rows.jsonl"))}
    assert rel.columns == ["a", "b", "f", "k"]
    assert vane.read_json(tmp_path, ignore_errors=True).count() == 4
    (tmp_path / "k=1" / "days.jsonl").write_text('{"a": 7, "day": "02/01/2024"}\n{oops\n')
    days = vane.read_json(
        tmp_path / "k=1" / "days.jsonl", ignore_errors=True, date_format="%d/%m/%Y"
    ).to_pylist()
    assert days == [{"a": 7, "day": dt.date(2024, 1, 2)}]


_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.dates().map(str),
    st.datetimes().map(str),
)
_JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["p", "q", "r s"]), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(st.sampled_from(["a", "b", "c d", "e"]), _JSON_VALUES, max_size=4),
        min_size=1,
        max_size=5,
    ),
    bad=st.lists(st.integers(0, 5), max_size=3),
)
def test_json_ignore_errors_reads_the_lines_that_parse_as_without_it(rows, bad):
    # Skipping lines that do not parse reads every other line exactly as read_json does.
    with tempfile.TemporaryDirectory() as directory:
        clean, noisy = os.path.join(directory, "clean.jsonl"), os.path.join(directory, "n.jsonl")
        lines = [json.dumps(row) for row in rows]
        with open(clean, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        for at in sorted(bad, reverse=True):
            lines.insert(min(at, len(lines)), '{"a": ')
        with open(noisy, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        expected = vane.read_json(clean)
        got = vane.read_json(noisy, ignore_errors=True)
        assert got.schema == expected.schema
        assert got.to_pylist() == expected.to_pylist()


def test_a_column_without_a_name_is_refused_where_duckdb_would_rename_it(tmp_path):
    pq.write_table(pa.table({"": [1], "b": [2]}), tmp_path / "t.parquet")
    with pytest.raises(SchemaError, match=r"column 0 of .*t\.parquet.* has an empty name"):
        vane.read_parquet(tmp_path / "t.parquet")
    for make in (
        lambda: vane.from_pydict({"a": [1], "": [2]}),
        lambda: vane.from_arrow(pa.table({"a": [1], "": [2]})),
        lambda: vane.from_pylist([{"a": 1, "": 2}]),
    ):
        with pytest.raises(SchemaError, match=r"a column named .. cannot be kept"):
            make()
    # A CSV header field left empty (pandas writes one for the index) is DuckDB's column<i>.
    (tmp_path / "t.csv").write_text(",a\n0,1.5\n1,2.5\n")
    assert vane.read_csv(tmp_path / "t.csv").columns == ["column0", "a"]


def test_columns_keeps_only_those_and_names_what_is_missing(tmp_path):
    vane.range(3).select("id", "id * 2 AS x").write_parquet(tmp_path / "t.parquet")
    assert vane.read_parquet(tmp_path / "t.parquet", columns=["x"]).to_pylist()[2] == {"x": 4}
    with pytest.raises(ConfigurationError, match="has no column 'nope'; its columns are id, x"):
        vane.read_parquet(tmp_path / "t.parquet", columns=["nope"])


def test_unknown_options_list_the_valid_ones(tmp_path):
    (tmp_path / "a.csv").write_text("a\n1\n")
    with pytest.raises(ConfigurationError, match=r"unknown option\(s\) \['delimeter'\].*delimiter"):
        vane.read_csv(tmp_path / "a.csv", delimeter=";")
    with pytest.raises(ConfigurationError, match="format='lines' is not one of"):
        vane.read_json(tmp_path / "a.csv", format="lines")


def test_a_remote_protocol_without_its_package_names_the_package():
    # Remote paths are read (tests/integration/test_object_stores.py); one whose fsspec
    # implementation is not installed says which package to install.
    with pytest.raises(MissingDependencyError, match="gcsfs"):
        vane.read_csv("gs://b/x.csv")


def test_duckdb_never_fetches_extensions_from_the_network():
    with pytest.raises(PlanError, match="requires the extension httpfs"):
        vane.sql("SELECT * FROM read_csv('https://example.com/x.csv')")


# ---- iteration ---------------------------------------------------------------------------------


def test_iter_batches_yields_exactly_batch_size_rows(tmp_path):
    for number in range(25):  # many small files: DuckDB's own batches follow them
        vane.range(37).select(f"id + {number * 37} AS id").write_parquet(
            tmp_path / f"{number}.parquet"
        )
    sizes = [b.num_rows for b in vane.read_parquet(tmp_path).iter_batches(batch_size=100)]
    assert sizes == [100] * 9 + [25]
    ids = [i for b in vane.read_parquet(tmp_path).iter_batches(100) for i in b["id"].to_pylist()]
    assert sorted(ids) == list(range(925))
