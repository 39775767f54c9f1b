"""Lance, Delta Lake and Iceberg tables, written and read by vane through each format's own
library, on local paths (Iceberg through a SQL catalog on SQLite: no server).

- Values round-trip (tables of generated types, tests/strategies.py), or the write fails
  naming the column and its type before anything is written; a type may come back only as a
  wider one that holds the same values (an int8 as Iceberg's int, a fixed-size list as a list).
- ``append`` and ``overwrite`` make new versions; ``create``/``error`` refuse a table that
  exists; a relation reads the version it was built on, in every action.
- The columns and filters asked for reach the format's scanner (Lance's ``scanner`` is called
  with them; Delta and Iceberg skip a data file the filter rules out: it can be deleted from
  disk and the filtered read still succeeds).
- A UDF that raises mid-write, and a kill -9 mid-write, leave the table at its previous
  version.
- Lance's vector index is built on write.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import vane
from tests.integration.support import read_and_exit
from tests.strategies import tables
from vane.errors import ConfigurationError, MissingDependencyError, SinkError, UDFError

lance = pytest.importorskip("lance")
deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

ROUND_TRIPS = settings(
    max_examples=int(os.environ.get("TABLE_FORMAT_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

_names = itertools.count()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("iceberg")
    return {
        "name": "test",
        "type": "sql",
        "uri": f"sqlite:///{where / 'catalog.db'}",
        "warehouse": f"file://{where / 'warehouse'}",
    }


# ---- the three formats behind one face -------------------------------------------------------


class Format:
    name: str
    appends: str = "append"
    creates: str

    def write(self, rel: vane.Relation, where: str, mode: str | None = None) -> Any:
        raise NotImplementedError

    def read(self, where: str, **options: Any) -> vane.Relation:
        raise NotImplementedError

    def version(self, where: str) -> int:
        raise NotImplementedError


class Lance(Format):
    name = "lance"
    creates = "create"

    def write(self, rel: vane.Relation, where: str, mode: str | None = None) -> Any:
        return rel.write_lance(where, mode=mode or "create")

    def read(self, where: str, **options: Any) -> vane.Relation:
        return vane.read_lance(where, **options)

    def version(self, where: str) -> int:
        return int(lance.dataset(where).version)


class Delta(Format):
    name = "delta"
    creates = "error"

    def write(self, rel: vane.Relation, where: str, mode: str | None = None) -> Any:
        return rel.write_deltalake(where, mode=mode or "error")

    def read(self, where: str, **options: Any) -> vane.Relation:
        return vane.read_deltalake(where, **options)

    def version(self, where: str) -> int:
        return int(deltalake.DeltaTable(where).version())


class Iceberg(Format):
    name = "iceberg"
    creates = "append"  # Iceberg's writers append by default, creating the table if missing

    def __init__(self, catalog: dict[str, str]) -> None:
        self.catalog = catalog

    def write(self, rel: vane.Relation, where: str, mode: str | None = None) -> Any:
        return rel.write_iceberg(where, mode=mode or "append", catalog_kwargs=self.catalog)

    def read(self, where: str, **options: Any) -> vane.Relation:
        if "filter" in options:
            options["row_filter"] = options.pop("filter")
        return vane.read_iceberg(where, catalog_kwargs=self.catalog, **options)

    def version(self, where: str) -> int:
        from pyiceberg.catalog import load_catalog

        props = dict(self.catalog)
        table = load_catalog(props.pop("name"), **props).load_table(where)
        snapshot = table.current_snapshot()
        return 0 if snapshot is None else int(snapshot.snapshot_id)


@pytest.fixture(params=["lance", "delta", "iceberg"])
def fmt(request: pytest.FixtureRequest, catalog: dict[str, str]) -> Format:
    return {"lance": Lance(), "delta": Delta(), "iceberg": Iceberg(catalog)}[request.param]


def place(fmt: Format, tmp_path: Path) -> str:
    """A new table's name: a path, or an Iceberg identifier."""
    number = next(_names)
    if isinstance(fmt, Iceberg):
        return f"ns.t{number}"
    return str(tmp_path / f"t{number}.{fmt.name}")


# ---- values ----------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Python values equal exactly: NaN equals NaN, -0.0 is not 0.0, 1 is not True."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return (a.tzinfo is None) == (b.tzinfo is None) and a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, decimal.Decimal)) and isinstance(b, (int, decimal.Decimal)):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


_UNITS = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def widened(src: pa.DataType, dst: pa.DataType) -> bool:
    """``dst`` holds every value of ``src`` as it is (a wider integer, a finer timestamp unit, a
    list for a fixed-size list, text for a dictionary of text), at every depth."""
    if src.equals(dst):
        return True
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        (lo, hi), (dlo, dhi) = _int_range(src), _int_range(dst)
        return dlo <= lo and hi <= dhi
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        return _UNITS[dst.unit] >= _UNITS[src.unit] and (src.tz is None) == (dst.tz is None)
    if pa.types.is_dictionary(src):
        return widened(src.value_type, dst)
    if pa.types.is_large_string(src) or pa.types.is_large_string(dst):
        return pa.types.is_string(src) or pa.types.is_string(dst)
    if pa.types.is_fixed_size_list(src) and (pa.types.is_list(dst) or pa.types.is_large_list(dst)):
        return widened(src.value_type, dst.value_type)
    if (pa.types.is_list(src) or pa.types.is_large_list(src)) and (
        pa.types.is_list(dst) or pa.types.is_large_list(dst)
    ):
        return widened(src.value_type, dst.value_type)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        return [f.name for f in src] == [f.name for f in dst] and all(
            widened(a.type, b.type) for a, b in zip(src, dst, strict=True)
        )
    if pa.types.is_map(src) and pa.types.is_map(dst):
        return widened(src.key_type, dst.key_type) and widened(src.item_type, dst.item_type)
    return False


@given(table=tables(max_columns=3, max_rows=4))
@ROUND_TRIPS
def test_values_round_trip_or_the_write_names_the_column(
    fmt: Format, tmp_path: Path, table: pa.Table
) -> None:
    rel = vane.from_arrow(table)
    expected = rel.to_arrow()
    where = place(fmt, tmp_path)
    try:
        fmt.write(rel, where)
    except SinkError as exc:
        # refused before anything was written, naming a column and the type it has
        message = str(exc)
        assert "nothing was written" in message, message
        assert any(f"column {name!r}" in message for name in _paths(expected.schema)), message
        return
    got = fmt.read(where).to_arrow()
    assert got.column_names == expected.column_names
    for want, have in zip(expected.schema, got.schema, strict=True):
        assert widened(want.type, have.type), f"{want.name}: {want.type} came back {have.type}"
    assert got.num_rows == expected.num_rows
    for a, b in zip(expected.to_pylist(), got.to_pylist(), strict=True):
        assert same(_plain(a), _plain(b)), f"{a} != {b}"


def _paths(schema: pa.Schema) -> list[str]:
    """Every column and nested field as check_types names it."""
    found: list[str] = []

    def walk(name: str, kind: pa.DataType) -> None:
        found.append(name)
        if pa.types.is_struct(kind):
            for child in kind:
                walk(f"{name}.{child.name}", child.type)
        elif pa.types.is_map(kind):
            walk(f"{name}.key", kind.key_type)
            walk(f"{name}.value", kind.item_type)
        elif pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind):
            walk(f"{name}[]", kind.value_type)

    for f in schema:
        walk(f.name, f.type)
    return found


def _plain(value: Any) -> Any:
    """A map's pairs as a list of pairs either way (Arrow gives them as tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def test_a_type_the_format_cannot_hold_is_refused_by_name(
    tmp_path: Path, catalog: dict[str, str]
) -> None:
    rel = vane.sql("SELECT 1::UTINYINT AS small, 2::BIGINT AS id")
    with pytest.raises(SinkError, match=r"column 'small' is uint8, which Delta Lake cannot hold"):
        rel.write_deltalake(str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()
    nanos = vane.sql("SELECT TIMESTAMP_NS '2024-01-01 00:00:00.000000001' AS at")
    with pytest.raises(SinkError, match=r"column 'at' is timestamp\[ns\], which Iceberg"):
        nanos.write_iceberg("ns.refused", catalog_kwargs=catalog)
    nested = vane.sql("SELECT {'a': 1::UBIGINT} AS s")
    with pytest.raises(SinkError, match=r"column 's.a' is uint64, which Iceberg"):
        nested.write_iceberg("ns.refused", catalog_kwargs=catalog)


# ---- modes and versions ----------------------------------------------------------------------


def test_append_overwrite_and_versions(fmt: Format, tmp_path: Path) -> None:
    where = place(fmt, tmp_path)
    rows = vane.range(100).with_column("text", "'row ' || id")
    first = fmt.write(rows, where)
    assert (first.rows, first.files > 0, first.bytes > 0) == (100, True, True)
    pinned = fmt.read(where)
    v1 = fmt.version(where)
    second = fmt.write(rows.filter("id < 10"), where, "append")
    assert second.rows == 10
    assert fmt.version(where) != v1
    # the relation built before the append reads the version it was built on, every time
    assert pinned.count() == 100
    assert pinned.count() == 100
    assert fmt.read(where).count() == 110
    assert fmt.read(where, **{_AT[fmt.name]: v1}).count() == 100  # an older version, asked for
    fmt.write(rows.filter("id >= 95"), where, "overwrite")
    assert sorted(r["id"] for r in fmt.read(where).to_pylist()) == [95, 96, 97, 98, 99]
    if fmt.creates != "append":
        with pytest.raises(SinkError, match="already holds"):
            fmt.write(rows, where, fmt.creates)
    assert fmt.read(where).count() == 5


_AT = {"lance": "version", "delta": "version", "iceberg": "snapshot_id"}


def test_delta_partitions(tmp_path: Path) -> None:
    where = tmp_path / "parted"
    rows = vane.range(30).with_column("kind", "'k' || (id % 3)")
    rows.write_deltalake(str(where), partition_by="kind")
    assert sorted(p.name for p in where.glob("kind=*")) == ["kind=k0", "kind=k1", "kind=k2"]
    got = vane.read_deltalake(str(where), filter=vane.col("kind") == "k1")
    assert sorted(r["id"] for r in got.to_pylist()) == list(range(1, 30, 3))
    # values a path must escape: the files are found by the paths the log names
    odd = tmp_path / "odd"
    kinds = ["a b", "c/d", "é%2F", "x=y", None]
    vane.from_pydict({"id": list(range(5)), "kind": kinds}).write_deltalake(
        str(odd), partition_by="kind"
    )
    back = {r["id"]: r["kind"] for r in vane.read_deltalake(str(odd)).to_pylist()}
    assert back == dict(enumerate(kinds))


def test_iceberg_takes_a_pyiceberg_table(catalog: dict[str, str]) -> None:
    from pyiceberg.catalog import load_catalog

    vane.range(10).write_iceberg("ns.given", catalog_kwargs=catalog)
    props = dict(catalog)
    table = load_catalog(props.pop("name"), **props).load_table("ns.given")
    assert vane.range(5).write_iceberg(table).rows == 5  # as Daft takes it
    assert vane.read_iceberg(table).count() == 15
    with pytest.raises(SinkError, match=r"do not fit the columns of ns.given:\n(.|\n)*string"):
        vane.sql("SELECT 'x' AS id").write_iceberg(table)
    assert vane.read_iceberg("ns.given", catalog_kwargs=catalog).count() == 15


def test_columns_and_filter(fmt: Format, tmp_path: Path) -> None:
    where = place(fmt, tmp_path)
    fmt.write(vane.range(50).with_column("kind", "id % 3"), where)
    rel = fmt.read(where, columns=["id"], filter="id < 5")
    assert rel.columns == ["id"]
    assert sorted(r["id"] for r in rel.to_pylist()) == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigurationError, match="no column 'nope'"):
        fmt.read(where, columns=["nope"])
    if isinstance(fmt, Iceberg):  # pyiceberg's filter syntax has no arithmetic
        with pytest.raises(ConfigurationError, match="is not pyiceberg's filter syntax"):
            fmt.read(where, filter="id % 2 = 0")
        assert fmt.read(where).filter("id % 2 = 0").count() == 25


# ---- pushdown --------------------------------------------------------------------------------


def test_lance_scanner_is_given_the_columns_and_the_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = str(tmp_path / "pushed.lance")
    vane.range(1000).with_column("text", "'row ' || id").write_lance(where)
    calls: list[dict[str, Any]] = []
    real = lance.LanceDataset.scanner

    def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "scanner", observed)
    got = vane.read_lance(where, filter="id >= 990").select("text").to_pylist()
    assert len(got) == 10
    (call,) = calls
    # Lance reads the one column the result holds, and applies the filter itself
    assert call["columns"] == ["text"]
    assert "990" in str(call["filter"])
    calls.clear()
    assert vane.read_lance(where, columns=["id"]).filter("id < 3").count() == 3
    assert all(set(c["columns"]) <= {"id"} for c in calls)
    assert all("3" in str(c["filter"]) for c in calls)


def _two_files(fmt: Format, where: str) -> None:
    fmt.write(vane.range(100), where)
    fmt.write(vane.sql("SELECT range + 1000 AS id FROM range(100)"), where, "append")


def _file_of_high_ids(fmt: Format, where: str) -> Path:
    """The data file that holds ids 1000..1099 (the second write's)."""
    if isinstance(fmt, Delta):
        table = deltalake.DeltaTable(where)
        paths = [
            Path(where) / p
            for p in pa.table(table.get_add_actions(flatten=True))["path"].to_pylist()
        ]
    else:
        from pyiceberg.catalog import load_catalog

        assert isinstance(fmt, Iceberg)
        props = dict(fmt.catalog)
        table = load_catalog(props.pop("name"), **props).load_table(where)
        paths = [Path(t.file.file_path.removeprefix("file://")) for t in table.scan().plan_files()]
    import pyarrow.parquet as pq

    (high,) = [p for p in paths if pq.read_table(p)["id"][0].as_py() >= 1000]
    return high


@pytest.mark.parametrize("name", ["delta", "iceberg"])
def test_a_filtered_read_skips_the_files_it_rules_out(
    name: str, tmp_path: Path, catalog: dict[str, str]
) -> None:
    fmt: Format = Delta() if name == "delta" else Iceberg(catalog)
    where = place(fmt, tmp_path)
    _two_files(fmt, where)
    _file_of_high_ids(fmt, where).unlink()  # only a read that opens it can fail
    assert fmt.read(where, filter="id < 50").count() == 50
    if name == "delta":  # a later step's filter reaches the scan too (DuckDB pushes it)
        assert fmt.read(where).filter("id < 50").count() == 50
    with pytest.raises(vane.errors.VaneError):
        fmt.read(where).count()


# ---- failures mid-write ----------------------------------------------------------------------


def test_a_udf_failing_mid_write_leaves_the_previous_version(fmt: Format, tmp_path: Path) -> None:
    where = place(fmt, tmp_path)
    fmt.write(vane.range(20), where)
    before = fmt.version(where)

    def fails_late(batch: pa.Table) -> pa.Table:
        if pa.compute.max(batch["id"]).as_py() >= 3000:
            raise ValueError("the model fell over")
        return batch

    failing = vane.range(5000).map_batches(fails_late, schema={"id": "BIGINT"}, batch_size=500)
    with pytest.raises(UDFError, match="the model fell over"):
        fmt.write(failing, where, "append")
    assert fmt.version(where) == before
    assert fmt.read(where).count() == 20
    with pytest.raises(UDFError):
        fmt.write(failing, where, "overwrite")
    assert fmt.version(where) == before
    assert fmt.read(where).count() == 20


_KILLED_WRITER = """
import pathlib, sys, time
import pyarrow as pa
import vane

fmt, where, marker, catalog = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), sys.argv[4]
vane.configure(progress=False)

def data_files():
    if fmt == "lance":
        data = pathlib.Path(where) / "data"
        return len(list(data.iterdir())) if data.exists() else 0
    return len(list(pathlib.Path(where).glob("*.parquet"))) if fmt == "delta" else 0

before = data_files()

def slow(batch):
    if batch["id"][0].as_py() >= 20_000:
        # Mid-write once the sink has written some of the rows answered before this batch
        # (they may still be on their way to it as this call starts); pyiceberg keeps them.
        deadline = time.monotonic() + 60
        while fmt != "iceberg" and data_files() <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        marker.touch()
        time.sleep(60)
    return batch

rel = vane.range(40_000).map_batches(slow, schema={"id": "BIGINT"}, batch_size=5_000)
if fmt == "lance":
    rel.write_lance(where, mode="append", max_rows_per_file=5_000)
elif fmt == "delta":
    rel.write_deltalake(where, mode="append", target_file_size=1)
else:
    import json
    rel.write_iceberg(where, catalog_kwargs=json.loads(catalog))
"""


def test_kill_9_mid_write_leaves_the_previous_version(fmt: Format, tmp_path: Path) -> None:
    where = place(fmt, tmp_path)
    fmt.write(vane.range(7), where)
    before = fmt.version(where)
    files_before = _data_files(fmt, where)
    _kill_mid_write(fmt, where, tmp_path)
    if not isinstance(fmt, Iceberg):  # pyiceberg keeps up to a file's worth in memory
        assert _data_files(fmt, where) > files_before, "killed before any row was written"
    assert fmt.version(where) == before
    assert fmt.read(where).count() == 7
    fmt.write(vane.range(3), where, "append")  # and the next write commits as usual
    assert fmt.read(where).count() == 10


def test_what_a_killed_first_write_left_is_cleared_for_the_next(fmt: Format, tmp_path) -> None:
    # A first write killed mid-way leaves data files and no version; the next write once found
    # "not a Delta table" there and refused the path (Lance: test_what_a_killed_first_lance...).
    where = place(fmt, tmp_path)
    _kill_mid_write(fmt, where, tmp_path)
    if not isinstance(fmt, Iceberg):  # (an Iceberg write's start makes the table, empty)
        assert _data_files(fmt, where) > 0, "killed before any row was written"
    fmt.write(vane.range(3), where, fmt.creates)
    assert fmt.read(where).count() == 3


@pytest.mark.parametrize(
    "names",
    [
        ["notes.txt"],
        ["part-00000-d89ad01b-69c4-4ab4-bb06-20dfd26c55ec-c000.snappy.parquet", "notes.txt"],
        ["data.parquet"],
        ["raw/part-00000-d89ad01b-69c4-4ab4-bb06-20dfd26c55ec-c000.snappy.parquet"],
    ],
)
def test_a_folder_of_other_files_is_refused_and_kept(tmp_path, names) -> None:
    # Only what delta-rs's killed first write leaves is cleared; anything else is the user's.
    where = tmp_path / "t.delta"
    for name in names:
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_bytes(b"the user's")
    with pytest.raises(SinkError, match="is not a Delta table"):
        vane.range(3).write_deltalake(str(where))
    assert all((where / name).read_bytes() == b"the user's" for name in names)


def _kill_mid_write(fmt: Format, where: str, tmp_path: Path) -> None:
    """A writer process appending rows to ``where`` (made if absent), killed mid-write."""
    import json

    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(_KILLED_WRITER))
    marker = tmp_path / f"mid-write-{next(_names)}"
    catalog = json.dumps(getattr(fmt, "catalog", {}))
    root = Path(vane.__file__).resolve().parent.parent
    process = subprocess.Popen(
        [sys.executable, str(script), fmt.name, where, str(marker), catalog],
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert process.poll() is None, "the writer ended before it was mid-write"
            assert time.monotonic() < deadline, "the writer never got mid-write"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL


def _data_files(fmt: Format, where: str) -> int:
    """The data files on disk, referenced by a version or not."""
    if isinstance(fmt, Lance):
        data = Path(where) / "data"
        return len(list(data.iterdir())) if data.exists() else 0
    if isinstance(fmt, Delta):
        return len(list(Path(where).glob("*.parquet")))
    return 0


# ---- a process that read a table exits cleanly -----------------------------------------------


def test_a_process_that_read_a_table_exits_cleanly(fmt: Format, tmp_path: Path) -> None:
    # Many files, so that a scan stopped early leaves reads in flight: delta-rs's Python
    # filesystem, which Arrow's scan called from its own threads, crashed or hung the process
    # as it exited in nearly every run (now Arrow's own filesystem reads the files).
    where = place(fmt, tmp_path)
    rows = vane.range(400_000).with_column("s", "repeat('x', 20)")
    if isinstance(fmt, Delta):
        rows.write_deltalake(where, target_file_size=1)  # a file a batch: 16 or more
        assert len(list(Path(where).glob("*.parquet"))) >= 16
    elif isinstance(fmt, Lance):
        rows.write_lance(where, max_rows_per_file=25_000)
    else:
        for i in range(4):  # a commit each: pyiceberg's writer makes files of its own size
            fmt.write(rows.filter(f"id % 4 = {i}"), where, "append")
    options = {"catalog_kwargs": fmt.catalog} if isinstance(fmt, Iceberg) else {}
    for way in ("limit", "first batch", "count"):  # stopped early, and read to the end
        read_and_exit(fmt.name, where, way, options, tmp_path)


# ---- Lance's vector index --------------------------------------------------------------------


def test_write_lance_builds_a_vector_index(tmp_path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 8)).astype("float32")
    table = pa.table(
        {
            "id": pa.array(range(300), pa.int64()),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8),
        }
    )
    where = str(tmp_path / "vectors.lance")
    spec = {"column": "embedding", "metric": "cosine", "index_type": "IVF_FLAT"}
    result = vane.from_arrow(table).write_lance(where, vector_index={**spec, "num_partitions": 2})
    assert result.rows == 300
    dataset = lance.dataset(where)
    (index,) = dataset.describe_indices()
    assert "embedding" in str(index)
    nearest = dataset.to_table(nearest={"column": "embedding", "q": vectors[42], "k": 1})
    assert nearest["id"].to_pylist() == [42]
    # an append rebuilds the index over every row
    more = pa.table({"id": pa.array([300], pa.int64()), "embedding": table["embedding"][:1]})
    vane.from_arrow(more).write_lance(where, mode="append", vector_index=spec)
    dataset = lance.dataset(where)
    assert dataset.count_rows() == 301
    assert len(dataset.describe_indices()) == 1
    with pytest.raises(ConfigurationError, match="fixed-size float lists"):
        vane.range(3).write_lance(str(tmp_path / "x.lance"), vector_index={"column": "id"})
    assert not (tmp_path / "x.lance").exists()


@pytest.mark.parametrize("mode", ["create", "append"])
def test_an_index_that_cannot_be_built_leaves_the_committed_rows_readable(tmp_path, mode):
    # The index is built after the commit; its failure once aborted the write, and the abort
    # deleted the data files of the version just committed: a dataset that could not be read.
    where = str(tmp_path / "t.lance")
    rows = "SELECT range AS id, [range, 1, 2, 3]::FLOAT[4] AS v FROM range({}, {})"
    if mode == "append":
        vane.sql(rows.format(0, 5)).write_lance(where)
    index = {"column": "v", "index_type": "IVF_PQ"}  # IVF_PQ needs its partitions: refused
    with pytest.raises(SinkError, match="the rows were committed"):
        vane.sql(rows.format(5, 10)).write_lance(where, mode=mode, vector_index=index)
    found = lance.dataset(where).to_table(columns=["id"])["id"].to_pylist()
    assert sorted(found) == list(range(0 if mode == "append" else 5, 10))


# ---- on Ray ----------------------------------------------------------------------------------


def _doubled(batch: pa.Table) -> pa.Table:
    ids = batch["id"]
    return pa.table({"id": ids, "twice": pa.compute.multiply(ids, 2)})


@pytest.mark.ray
@pytest.mark.parametrize("name", ["lance", "iceberg"])
# ray.init forks the test process, which imported lance (at the top of this module); Ray
# Data's Lance reader calls an API Lance deprecated
@pytest.mark.filterwarnings("ignore:lance is not fork-safe", "ignore::DeprecationWarning")
def test_read_and_write_on_the_ray_runner(
    name: str, tmp_path: Path, on_ray: Any, catalog: dict[str, str]
) -> None:
    """One action on Ray reads a table, runs a UDF on Ray actors and writes another table:
    Lance is read by Ray Data's tasks (Iceberg on the driver); Lance fragments and Iceberg
    data files are written by Ray tasks and committed by the driver. (Delta streams to the
    driver's writer, as a plan without Ray steps does: the local tests cover that path.)"""
    fmt = Lance() if name == "lance" else Iceberg(catalog)
    source, target = place(fmt, tmp_path), place(fmt, tmp_path)
    fmt.write(vane.range(2000), source)  # no UDF: runs locally
    rel = fmt.read(source, filter="id < 1000").map_batches(
        _doubled,
        schema={"id": "BIGINT", "twice": "BIGINT"},
        batch_size=250,
        execution_backend="ray_actor",
    )
    result = fmt.write(rel, target)
    assert result.rows == 1000
    got = fmt.read(target).to_pylist()
    assert sorted((r["id"], r["twice"]) for r in got) == [(i, 2 * i) for i in range(1000)]
    if isinstance(fmt, Lance):  # a fragment or more per block, each from a Ray task
        assert result.files == len(lance.dataset(target).get_fragments()) > 1


# ---- packaging -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "extra", "call"),
    [
        ("lance", "lance", vane.read_lance),
        ("deltalake", "delta", vane.read_deltalake),
        ("pyiceberg", "iceberg", lambda p: vane.read_iceberg("ns.t", catalog_kwargs={})),
    ],
)
def test_a_missing_library_names_the_extra(
    module: str, extra: str, call: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=rf"vane-data\[{extra}\]"):
        call(str(tmp_path / "t"))


def test_a_resumable_lance_write_pays_only_for_what_no_run_answered(tmp_path):
    pytest.importorskip("lance")
    calls: list[int] = []
    broken = [True]

    def model(batch):
        calls.append(batch["id"][0].as_py())
        if broken[0] and batch["id"][0].as_py() == 40:
            raise RuntimeError("preempted")
        return batch

    job = vane.range(60).map_batches(model, schema={"id": "BIGINT"}, batch_size=20)
    uri = str(tmp_path / "table.lance")
    with pytest.raises(RuntimeError, match="preempted"):
        job.write_lance(uri, resume=True)
    broken[0] = False
    calls.clear()
    assert job.write_lance(uri, resume=True).rows == 60
    assert calls == [40]
    assert sorted(r["id"] for r in vane.read_lance(uri).to_pylist()) == list(range(60))


@pytest.mark.parametrize(
    "left",
    [
        ["data/.tmpWz1znX"],  # killed while Lance wrote its first data file
        ["data/0101.lance", "_transactions/0-ab.txn"],  # killed before the manifest
    ],
)
def test_what_a_killed_first_lance_write_left_is_cleared_for_the_next(tmp_path, left):
    pytest.importorskip("lance")
    uri = tmp_path / "table.lance"
    for name in left:
        (uri / name).parent.mkdir(parents=True, exist_ok=True)
        (uri / name).write_bytes(b"half a file")
    assert vane.range(5).write_lance(str(uri)).rows == 5
    assert vane.read_lance(str(uri)).count() == 5
