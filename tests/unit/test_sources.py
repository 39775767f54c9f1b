"""Sources: files, directories, globs and lists for each format; in-memory constructors."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vane
from vane.errors import ConfigurationError, SchemaError, SourceError, SourceNotFoundError
from vane.testing import assert_table_equal


@pytest.fixture
def parquet_tree(tmp_path):
    """Two hive partitions, a nested directory, and files that are not data."""
    root = tmp_path / "data"
    for year, ids in ((2024, [1, 2]), (2025, [3])):
        part = root / f"year={year}"
        part.mkdir(parents=True)
        pq.write_table(pa.table({"id": ids}), part / "a.parquet")
    (root / "_SUCCESS").write_text("")
    (root / ".hidden.parquet").write_text("not parquet")
    return root


def test_read_parquet_directory_is_recursive_with_hive_partitions(parquet_tree):
    rel = vane.read_parquet(parquet_tree)
    assert rel.columns == ["id", "year"]
    assert sorted(map(tuple, (r.values() for r in rel.to_pylist()))) == [
        (1, 2024),
        (2, 2024),
        (3, 2025),
    ]


def test_hive_partitioning_can_be_turned_off(parquet_tree):
    assert vane.read_parquet(parquet_tree, hive_partitioning=False).columns == ["id"]


def test_read_parquet_glob_file_and_list(parquet_tree):
    files = sorted(str(p) for p in parquet_tree.rglob("a.parquet"))
    assert vane.read_parquet(str(parquet_tree / "*" / "*.parquet")).count() == 3
    assert vane.read_parquet(str(parquet_tree / "**" / "*.parquet")).count() == 3
    assert vane.read_parquet(files[0]).to_pylist() == [{"id": 1}, {"id": 2}]
    assert vane.read_parquet(files).count() == 3


def test_read_csv_and_json(tmp_path):
    (tmp_path / "a.csv").write_text("id,name\n1,ann\n2,bob\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.csv").write_text("id,name\n3,cy\n")
    rel = vane.read_csv(tmp_path)
    assert rel.schema == pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert rel.order_by("id").to_pylist()[-1] == {"id": 3, "name": "cy"}
    (tmp_path / "t.tsv").write_text("id|x\n7|q\n")
    assert vane.read_csv(tmp_path / "t.tsv", delimiter="|").to_pylist() == [{"id": 7, "x": "q"}]

    (tmp_path / "rows.jsonl").write_text('{"id": 1, "tags": ["a"]}\n{"id": 2, "tags": []}\n')
    rel = vane.read_json(tmp_path / "rows.jsonl")
    assert rel.to_pylist() == [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": []}]


def test_missing_paths_are_clear_errors(tmp_path):
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        vane.read_parquet(tmp_path / "nope.parquet")
    with pytest.raises(SourceNotFoundError, match=r"glob .* holds no parquet files"):
        vane.read_parquet(str(tmp_path / "*.parquet"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceNotFoundError, match=r"directory .* holds no csv files"):
        vane.read_csv(tmp_path / "empty")
    with pytest.raises(ConfigurationError):
        vane.read_parquet([])


def test_a_file_that_is_not_parquet_is_a_source_error(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("hello")
    with pytest.raises(SourceError, match=r"bad\.parquet"):
        vane.read_parquet(bad)


def test_files_replaced_while_the_relation_is_built_say_so(tmp_path, monkeypatch):
    # Another write can replace the listed files before DuckDB opens them (an overwrite's
    # exchange), on every listing read_parquet tries: the error is the one a later read
    # gives, not DuckDB's "no files found".
    vane.range(10).write_parquet(tmp_path / "out", rows_per_file=5)
    from vane import api
    from vane.io import readers

    monkeypatch.setattr(api, "_LISTING_ATTEMPTS", 1)

    def replaced(files):  # returns None, as when pyarrow cannot read a footer
        for name in files:
            (tmp_path / "out" / name).unlink(missing_ok=True)

    monkeypatch.setattr(readers, "parquet_footers", replaced)
    with pytest.raises(SourceError, match="no longer exist"):
        vane.read_parquet(tmp_path / "out")


FORMATS = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl"}


def _rewrite(path, fmt: str, how: str) -> None:
    """Replace the file at ``path``: by a vane overwrite, or rewritten in place by another tool
    with the same columns or with others."""
    if how == "overwrite":
        getattr(vane.range(4), f"write_{fmt}")(path, mode="overwrite")
        return
    text = {
        ("parquet", "same"): None,
        ("csv", "same"): "id\n7\n",
        ("json", "same"): '{"id": 7}\n',
        ("csv", "other"): "name\nx\n",
        ("json", "other"): '{"name": "x"}\n',
    }.get((fmt, how))
    if fmt == "parquet":
        table = pa.table({"id": [7]}) if how == "same" else pa.table({"name": ["x"]})
        with open(path, "r+b") as handle:  # in place: the same inode
            handle.truncate(0)
            pq.write_table(table, handle)
    else:
        with open(path, "w") as handle:
            handle.write(text or "")


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("how", ["overwrite", "same", "other"])
@pytest.mark.parametrize("layout", ["file", "folder"])
def test_a_replaced_file_fails_the_read_as_a_replaced_folder_does(tmp_path, fmt, how, layout):
    path = tmp_path / "data" / f"one{FORMATS[fmt]}"
    getattr(vane.range(3), f"write_{fmt}")(path)
    reader = getattr(vane, f"read_{fmt}")
    rel = reader(path if layout == "file" else tmp_path / "data")
    _rewrite(path, fmt, how)
    actions = [rel.count, rel.to_arrow, lambda: list(rel.iter_batches()), rel.to_pylist]
    actions.append(lambda: rel.write_parquet(tmp_path / "copy", mode="overwrite"))
    for action in actions:
        with pytest.raises(SourceError, match=r"one\.\w+' changed since the relation was built"):
            action()
    assert reader(path).count() == {"overwrite": 4}.get(how, 1)  # built again: what is there now


def test_from_pydict_pylist_pandas_arrow():
    expected = pa.table({"id": [1, 2], "text": ["a", None]})
    assert_table_equal(vane.from_pydict({"id": [1, 2], "text": ["a", None]}), expected)
    assert_table_equal(vane.from_pylist([{"id": 1, "text": "a"}, {"id": 2}]), expected)
    assert_table_equal(vane.from_pandas(expected.to_pandas()), expected)
    assert_table_equal(vane.from_arrow(expected), expected)
    assert_table_equal(vane.from_arrow(expected.to_batches()[0]), expected)


def test_from_pylist_keeps_keys_that_first_appear_later():
    rel = vane.from_pylist([{"a": 1}, {"a": 2, "b": "x"}])
    assert rel.to_pylist() == [{"a": 1, "b": None}, {"a": 2, "b": "x"}]


def test_from_pydict_errors_name_the_column():
    with pytest.raises(SchemaError, match="column 'mixed'"):
        vane.from_pydict({"ok": [1, 2], "mixed": [1, "two"]})
    with pytest.raises(SchemaError, match="different lengths"):
        vane.from_pydict({"a": [1, 2], "b": [1]})


def test_record_batch_reader_streams_once():
    schema = pa.schema([("id", pa.int64())])
    batches = (pa.record_batch([pa.array([i])], schema=schema) for i in range(3))
    rel = vane.from_arrow(pa.RecordBatchReader.from_batches(schema, batches))
    assert rel.schema == schema  # known without reading the stream
    assert rel.filter("id > 0").count() == 2
    with pytest.raises(SourceError, match="read once"):
        rel.count()


def test_range():
    assert vane.range(4).to_pylist() == [{"id": i} for i in range(4)]
    assert vane.range(0).count() == 0
    with pytest.raises(ConfigurationError):
        vane.range(-1)
