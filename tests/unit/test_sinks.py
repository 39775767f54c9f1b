"""Sinks: round trips, write modes, partitioning, file sizes, and atomic commit on failure."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from vane.errors import ConfigurationError, ExecutionError, SinkError
from vane.testing import assert_table_equal

READERS = {"parquet": vane.read_parquet, "csv": vane.read_csv, "json": vane.read_json}


def visible(path) -> list[str]:
    """The names in a directory, less the lock file vane keeps beside what it wrote."""
    return sorted(n for n in os.listdir(path) if not n.endswith(".vane-lock"))


def tree(path) -> dict[str, int]:
    """Every file under path (relative name -> size), hidden ones included, but for the empty
    lock file vane keeps beside each destination it writes (docs/io.md)."""
    return {
        os.path.relpath(os.path.join(root, f), path): os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(path)
        for f in files
        if not f.endswith(".vane-lock")
    }


def sample(n: int = 1000) -> vane.Relation:
    return vane.range(n).select(
        "id", "id / 2 AS x", "'row ' || id::VARCHAR AS text", "id % 3 = 0 AS flag"
    )


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_round_trip_keeps_rows_types_and_order(tmp_path, fmt):
    rel = sample()
    result = getattr(rel, f"write_{fmt}")(tmp_path / "out")
    assert (result.rows, result.files) == (1000, 1)
    assert result.bytes == sum(tree(tmp_path / "out").values()) > 0
    assert result.seconds >= 0
    assert_table_equal(READERS[fmt](tmp_path / "out"), rel)


def test_parquet_round_trip_of_nested_types(tmp_path):
    rel = vane.range(5).select(
        "id",
        "[id::FLOAT, 1.5]::FLOAT[2] AS vec",
        "[id, id + 1] AS ids",
        "{'a': id::VARCHAR, 'b': id / 3} AS s",
        "MAP {'k': id::INTEGER} AS m",
        "DATE '2024-01-01' + id::INTEGER AS day",
    )
    rel.write_parquet(tmp_path / "nested")
    assert_table_equal(vane.read_parquet(tmp_path / "nested"), rel)


def test_json_round_trip_of_lists_and_structs(tmp_path):
    rel = vane.range(3).select("id", "[id, id * 2] AS ids", "{'a': id::VARCHAR} AS s")
    rel.write_json(tmp_path / "j")
    assert vane.read_json(tmp_path / "j").to_pylist() == rel.to_pylist()


def test_a_path_with_the_format_extension_is_one_file(tmp_path):
    result = sample(10).write_parquet(tmp_path / "one.parquet")
    assert result.files == 1 and (tmp_path / "one.parquet").is_file()
    assert vane.read_parquet(tmp_path / "one.parquet").count() == 10
    assert tree(tmp_path) == {"one.parquet": result.bytes}


def test_modes(tmp_path):
    out = tmp_path / "out"
    sample(10).write_parquet(out)
    before = tree(out)
    with pytest.raises(SinkError, match=r"already exists.*mode='overwrite'"):
        sample(10).write_parquet(out)
    assert tree(out) == before

    sample(5).write_parquet(out, mode="append")
    assert vane.read_parquet(out).count() == 15 and len(tree(out)) == 2

    sample(3).write_parquet(out, mode="overwrite")
    assert vane.read_parquet(out).count() == 3 and len(tree(out)) == 1
    assert visible(tmp_path) == ["out"]  # nothing left beside it but the lock


def test_an_empty_directory_is_not_in_the_way(tmp_path):
    (tmp_path / "out").mkdir()
    assert sample(4).write_csv(tmp_path / "out").rows == 4


def test_append_to_a_single_file_is_an_error(tmp_path):
    with pytest.raises(SinkError, match="append"):
        sample(3).write_parquet(tmp_path / "x.parquet", mode="append")
    with pytest.raises(ConfigurationError, match="mode="):
        sample(3).write_parquet(tmp_path / "x", mode="replace")  # type: ignore[arg-type]


def test_rows_per_file(tmp_path):
    result = sample(1000).write_json(tmp_path / "out", rows_per_file=300)
    sizes = sorted(
        vane.read_json(tmp_path / "out" / name).count() for name in tree(tmp_path / "out")
    )
    assert (result.files, sizes) == (4, [100, 300, 300, 300])
    assert vane.read_json(tmp_path / "out").to_pylist() == sample(1000).to_pylist()


def test_partition_by_writes_hive_directories(tmp_path):
    rel = sample(30).with_column("bucket", "id % 3")
    result = rel.write_parquet(tmp_path / "out", partition_by="bucket", rows_per_file=4)
    dirs = sorted({os.path.dirname(name) for name in tree(tmp_path / "out")})
    assert dirs == ["bucket=0", "bucket=1", "bucket=2"]
    assert result.rows == 30 and result.files == len(tree(tmp_path / "out"))
    back = vane.read_parquet(tmp_path / "out")
    assert back.columns == ["id", "x", "text", "flag", "bucket"]
    assert_table_equal(back.order_by("id"), rel, check_order=True)
    with pytest.raises(ConfigurationError, match="partition_by names"):
        rel.write_parquet(tmp_path / "bad", partition_by="nope")


@settings(max_examples=25, deadline=None)
@given(
    keys=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    rows_per_file=st.integers(1, 7),
    fmt=st.sampled_from(["parquet", "csv", "json"]),
)
def test_partitioned_files_hold_at_most_rows_per_file(keys, rows_per_file, fmt):
    # Each partition's rows are cut into files of rows_per_file rows, in order, as an
    # unpartitioned write cuts its stream (the first file of a partition once took them all).
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "out")
        table = pa.table({"id": pa.array(range(len(keys)), pa.int64()), "k": keys})
        getattr(vane.from_arrow(table), f"write_{fmt}")(
            out, partition_by="k", rows_per_file=rows_per_file
        )
        for key in set(keys):
            part = os.path.join(out, f"k={key}")
            names = sorted(os.listdir(part))
            ids = [READERS[fmt](os.path.join(part, n)).to_arrow()["id"].to_pylist() for n in names]
            expected = [i for i, k in enumerate(keys) if k == key]
            assert [len(chunk) for chunk in ids] == [
                len(expected[i : i + rows_per_file]) for i in range(0, len(expected), rows_per_file)
            ]
            assert [i for chunk in ids for i in chunk] == expected


def test_csv_refuses_nested_columns_with_the_fix(tmp_path):
    rel = vane.range(2).select("id", "[id] AS ids")
    with pytest.raises(ConfigurationError, match=r"nested column.*'ids'.*ids::VARCHAR"):
        rel.write_csv(tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
@pytest.mark.parametrize("mode", ["error", "overwrite", "append"])
def test_failure_midway_leaves_destination_untouched(tmp_path, fmt, mode):
    out = tmp_path / "out"
    if mode != "error":
        sample(7).write_parquet(out) if fmt == "parquet" else getattr(sample(7), f"write_{fmt}")(
            out
        )
    before = {name: (out / name).read_bytes() for name in tree(out)} if out.exists() else None
    # The 900,000th row raises inside DuckDB after many batches have been written.
    failing = vane.range(1_000_000).with_column(
        "v", "CASE WHEN id = 899999 THEN error('row 900000 is bad') ELSE id END"
    )
    with pytest.raises(ExecutionError, match="row 900000 is bad") as info:
        getattr(failing, f"write_{fmt}")(out, mode=mode, rows_per_file=100_000)
    assert "is as it was" in str(info.value)
    after = {name: (out / name).read_bytes() for name in tree(out)} if out.exists() else None
    assert after == before
    assert visible(tmp_path) == (["out"] if before is not None else [])


def test_interrupt_during_write_leaves_nothing_behind(tmp_path):
    def stop_after_two():
        schema = pa.schema([("id", pa.int64())])
        for i in range(10):
            if i == 2:
                raise KeyboardInterrupt
            yield pa.record_batch([pa.array([i])], schema=schema)

    schema = pa.schema([("id", pa.int64())])
    rel = vane.from_arrow(pa.RecordBatchReader.from_batches(schema, stop_after_two()))
    with pytest.raises((KeyboardInterrupt, ExecutionError)):
        rel.write_parquet(tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_write_result_reads_as_a_sentence(tmp_path):
    text = str(sample(10).write_parquet(tmp_path / "o"))
    assert text.startswith("wrote 10 rows to ") and "in 1 file " in text


def test_parquet_joins_small_batches_into_row_groups(tmp_path):
    # A UDF's 1,000-row batches used to become 1,000-row row groups: 150 of them here.
    rel = vane.range(150_000).map_batches(lambda b: b, schema={"id": "BIGINT"}, batch_size=1000)
    rel.write_parquet(tmp_path / "out")
    (path,) = (tmp_path / "out").iterdir()
    metadata = pq.ParquetFile(path).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert len(sizes) == 3 and max(sizes) <= 65_536 and sum(sizes) == 150_000
    assert pq.read_table(path).column("id").to_pylist() == list(range(150_000))


def test_parquet_row_groups_stay_under_the_byte_bound(tmp_path, monkeypatch):
    from vane.io import sinks

    wide = vane.range(10_000).select("id", "repeat('x', 1000) AS text")
    monkeypatch.setattr(sinks, "ROW_GROUP_BYTES", 1_000_000)
    wide.map_batches(lambda b: b, schema=wide.schema, batch_size=100).write_parquet(
        tmp_path / "out"
    )
    (path,) = (tmp_path / "out").iterdir()
    metadata = pq.ParquetFile(path).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sum(sizes) == 10_000 and max(sizes) < 1_000  # ~1 KB a row: under 1,000 rows a group
    assert len(sizes) <= 20  # the UDF's 100-row batches were joined (not 100 groups)
    assert_table_equal(vane.read_parquet(path), wide)


def _embeddings(batch: pa.Table) -> pa.Table:
    # 384 floats a row, made by numpy: their memory is not Arrow's, so Arrow's pool sees only
    # what the writer itself allocates.
    values = np.random.default_rng(len(batch)).random(len(batch) * 384, dtype=np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(values), 384)
    return pa.table({"id": batch["id"], "v": vectors, "k": pc.bit_wise_and(batch["id"], 3)})


@pytest.mark.parametrize("partitioned", [False, True], ids=["one-file", "partitioned"])
def test_parquet_row_groups_hold_one_copy_of_their_rows(tmp_path, partitioned):
    # A row group gathers many small UDF batches (here 200-row batches of 1.5 KB rows, 30 MB in
    # all, so the whole output is one group). Joining them all into one batch just before
    # writing held every row group twice (and the UDF's batches besides): Arrow's memory peaked
    # at 2.8x the output. Now the rows are copied once into Arrow's memory while the group
    # gathers (the UDF's batches let go, see vane._arrow.coalesced; a partitioned write copies
    # each partition's run of rows), and the group is written chunk by chunk, not joined again.
    rows = 20_000
    rel = vane.range(rows).map_batches(
        _embeddings, schema={"id": "BIGINT", "v": "FLOAT[384]", "k": "BIGINT"}, batch_size=200
    )
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    pa.set_memory_pool(pool)
    try:
        result = rel.write_parquet(tmp_path / "out", partition_by="k" if partitioned else None)
    finally:
        pa.set_memory_pool(previous)
    assert result.rows == rows
    output = rows * (8 + 384 * 4 + 8)
    assert pool.max_memory() < 1.25 * output
    written = vane.read_parquet(tmp_path / "out").order_by("id").to_arrow()
    assert written.column("id").to_pylist() == list(range(rows))
    expected = pa.concat_tables(
        _embeddings(pa.table({"id": pa.array(range(start, start + 200), pa.int64())}))
        for start in range(0, rows, 200)
    )
    assert written.column("v").equals(expected.column("v"))


def test_coalesced_lets_go_of_the_batches_it_was_given():
    # The joined copies are Arrow's; the batches given are released as the table gathers, so
    # memory their maker allocated (numpy here) is not held until the row group is written.
    import weakref

    from vane._arrow import JOIN_BYTES, coalesced

    arrays = [np.arange(i * 16_384, (i + 1) * 16_384, dtype=np.int64) for i in range(40)]
    refs = [weakref.ref(a) for a in arrays]
    batches = (pa.record_batch({"x": pa.array(a)}) for a in arrays)
    del arrays
    tables = coalesced(batches, max_rows=10**9, max_bytes=10**12)
    (table,) = list(tables)
    assert table.num_rows == 40 * 16_384
    assert table.column("x").to_numpy().tolist() == list(range(40 * 16_384))
    alive = sum(ref() is not None for ref in refs)
    assert alive <= JOIN_BYTES // (16_384 * 8)  # at most the last megabyte's batches


def test_a_file_name_is_one_file_in_any_case_and_another_formats_name_is_refused(tmp_path):
    rel = vane.range(3)
    rel.write_json(tmp_path / "out.JSONL")
    assert (tmp_path / "out.JSONL").is_file()
    assert vane.read_json(tmp_path / "out.JSONL").count() == 3
    for write, name in (
        (rel.write_parquet, "x.csv"),
        (rel.write_csv, "x.parquet"),
        (rel.write_json, "x.CSV"),
    ):
        with pytest.raises(ConfigurationError, match=r"names a .* file, and this writes"):
            write(tmp_path / name)
        assert not (tmp_path / name).exists()


def _failing_rows(tmp_path):
    """A relation whose rows fail part-way through a write (a row that DuckDB refuses)."""
    return vane.range(200_000).select("id", "CASE WHEN id = 150000 THEN error('bad row') END AS e")


@pytest.mark.parametrize("where", ["in the cleanup", "before the cleanup"])
def test_a_ctrl_c_that_lands_on_a_writes_cleanup_leaves_nothing(tmp_path, monkeypatch, where):
    # One Ctrl-C can reach a write twice: DuckDB's interrupted stream starts its cleanup, and
    # Python's own KeyboardInterrupt lands at the cleanup's first line (or just before it).
    from vane.io import commit, sinks

    real_abort = commit.Staging.abort
    real_surely = sinks.abort_surely
    landed: list[str] = []

    def abort_once_interrupted(self):
        if not landed:
            landed.append("abort")
            raise KeyboardInterrupt
        real_abort(self)

    def surely_once_interrupted(abort):
        if not landed:
            landed.append("surely")
            raise KeyboardInterrupt
        real_surely(abort)

    if where == "in the cleanup":
        monkeypatch.setattr(commit.Staging, "abort", abort_once_interrupted)
    else:
        monkeypatch.setattr(sinks, "abort_surely", surely_once_interrupted)
    out = tmp_path / "out"
    with pytest.raises((KeyboardInterrupt, vane.errors.VaneError)):
        _failing_rows(tmp_path).write_parquet(str(out))
    assert landed  # the interrupt did land
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging, no output
