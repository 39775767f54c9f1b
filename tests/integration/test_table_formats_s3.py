"""Lance, Delta Lake and Iceberg tables on S3 (moto's S3 server on 127.0.0.1), written and read
by vane with ``storage_options`` in vane's own spelling, translated for each library in one place
(``vane/io/tables/options.py``); Iceberg through a SQL catalog on SQLite whose warehouse is an
``s3://`` prefix.

- Each format round-trips on S3: create, append, overwrite, each a new version; the options
  given to a write and the environment alone (``AWS_ENDPOINT_URL``, as users reach MinIO or R2)
  both reach the store.
- A write that fails mid-stream leaves the table at its previous version on S3.
- The product pages' embedding job: Parquet on S3 -> an embedding UDF -> ``write_lance`` on
  S3 -> read back, and a nearest-neighbour query finds a row by its vector.
"""

from __future__ import annotations

import itertools
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import vane
from tests.integration.support import read_and_exit
from tests.s3_server import ACCESS_KEY, SECRET_KEY, local_s3
from vane.errors import SinkError, UDFError

lance = pytest.importorskip("lance")
deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")
botocore_session = pytest.importorskip("botocore.session")
pytest.importorskip("moto.server")

_names = itertools.count()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with local_s3(own_process=True) as url:  # delta-rs needs the server out of this process
        yield url


@pytest.fixture(scope="module")
def bucket(endpoint: str) -> str:
    name = f"tables-{uuid.uuid4().hex[:8]}"
    botocore_session.get_session().create_client("s3", endpoint_url=endpoint).create_bucket(
        Bucket=name
    )
    return name


@pytest.fixture(scope="module")
def catalog(bucket: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("iceberg")
    return {
        "name": "s3test",
        "type": "sql",
        "uri": f"sqlite:///{where / 'catalog.db'}",
        "warehouse": f"s3://{bucket}/warehouse",
    }


def vane_options(endpoint: str) -> dict[str, str]:
    """What a user passes to any vane reader or writer: vane's (pandas', fsspec's) names."""
    return {
        "endpoint_url": endpoint,
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "region": "us-east-1",
    }


class Table:
    """One table on S3 and the format's own library reading its version (outside vane)."""

    def __init__(self, fmt: str, bucket: str, endpoint: str, catalog: dict[str, str]) -> None:
        self.fmt, self.endpoint, self.catalog = fmt, endpoint, catalog
        number = next(_names)
        self.where = {
            "lance": f"s3://{bucket}/t{number}.lance",
            "delta": f"s3://{bucket}/t{number}_delta",
            "iceberg": f"ns.t{number}",
        }[fmt]

    def write(self, rel: vane.Relation, mode: str, **options: Any) -> Any:
        if self.fmt == "lance":
            return rel.write_lance(self.where, mode=mode, **options)
        if self.fmt == "delta":
            return rel.write_deltalake(self.where, mode=mode, **options)
        return rel.write_iceberg(self.where, mode=mode, catalog_kwargs=self.catalog, **options)

    def read(self, **options: Any) -> vane.Relation:
        if self.fmt == "lance":
            return vane.read_lance(self.where, **options)
        if self.fmt == "delta":
            return vane.read_deltalake(self.where, **options)
        return vane.read_iceberg(self.where, catalog_kwargs=self.catalog, **options)

    def data_files(self, bucket: str) -> list[str]:
        """The table's data files on the server (those of every version, and any left over)."""
        name = self.where.split("/")[-1] if self.fmt != "iceberg" else None
        prefix = {
            "lance": f"{name}/data/",
            "delta": f"{name}/part-",
            "iceberg": f"warehouse/{self.where.replace('.', '/')}/data/",
        }[self.fmt]
        client = botocore_session.get_session().create_client("s3", endpoint_url=self.endpoint)
        listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for o in listed.get("Contents", []))

    def version(self) -> int:
        if self.fmt == "lance":
            return int(lance.dataset(self.where, storage_options={"allow_http": "true"}).version)
        if self.fmt == "delta":
            table = deltalake.DeltaTable(self.where, storage_options={"AWS_ALLOW_HTTP": "true"})
            return int(table.version())
        from pyiceberg.catalog import load_catalog

        props = dict(self.catalog, **{"s3.endpoint": self.endpoint})
        snapshot = load_catalog(props.pop("name"), **props).load_table(self.where)
        current = snapshot.current_snapshot()
        return 0 if current is None else int(current.snapshot_id)


FORMATS = ["lance", "delta", "iceberg"]
CREATES = {"lance": "create", "delta": "error", "iceberg": "append"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_round_trips_on_s3(fmt, bucket, endpoint, catalog) -> None:
    table = Table(fmt, bucket, endpoint, catalog)
    rows = vane.range(100).select("id", "'v' || id AS text")
    options = vane_options(endpoint)
    assert table.write(rows, CREATES[fmt], storage_options=options).rows == 100
    first = table.version()
    # the environment alone (AWS_ENDPOINT_URL, the test credentials) reaches the store too
    assert table.write(rows.filter("id < 10"), "append").rows == 10
    second = table.version()
    assert second != first
    back = table.read(storage_options=options)
    assert back.count() == 110
    assert sorted(r["id"] for r in table.read().filter("id < 3").to_pylist()) == [0, 0, 1, 1, 2, 2]
    table.write(rows.filter("id >= 95"), "overwrite", storage_options=options)
    assert table.version() not in (first, second)
    assert sorted(r["id"] for r in table.read().select("id").to_pylist()) == [95, 96, 97, 98, 99]
    assert back.count() == 110  # a relation reads the version it was built on


def _fails_late(batch: pa.Table) -> pa.Table:
    if pa.compute.max(batch["id"]).as_py() >= 3000:
        raise ValueError("the model fell over")
    return batch


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_write_leaves_the_previous_version_on_s3(fmt, bucket, endpoint, catalog) -> None:
    table = Table(fmt, bucket, endpoint, catalog)
    table.write(vane.range(20), CREATES[fmt])
    before, files = table.version(), table.data_files(bucket)
    failing = vane.range(5000).map_batches(_fails_late, schema={"id": "BIGINT"}, batch_size=500)
    for mode in ("append", "overwrite"):
        with pytest.raises(UDFError, match="the model fell over"):
            table.write(failing, mode, **({"max_rows_per_file": 1000} if fmt == "lance" else {}))
        assert table.version() == before
        assert table.read().count() == 20
        if fmt != "delta":  # Lance and vane's Iceberg writer remove the files they wrote
            assert table.data_files(bucket) == files


def _referenced(where: str) -> set[str]:
    """The data files some version of the Lance dataset at ``where`` holds."""
    opened = lance.dataset(where, storage_options={"allow_http": "true"})
    files = set()
    for version in opened.versions():
        at = lance.dataset(
            where, version=version["version"], storage_options={"allow_http": "true"}
        )
        files |= {f.path for fragment in at.get_fragments() for f in fragment.data_files()}
    return files


def test_a_lance_commit_that_fails_on_s3_leaves_no_files_behind(bucket, endpoint) -> None:
    table = Table("lance", bucket, endpoint, {})
    table.write(vane.range(20), "create")
    meanwhile: list[int] = []

    def overwritten_meanwhile(batch: pa.Table) -> pa.Table:
        # Another writer replaces the rows while this append is under way: its commit, built
        # on the version before, conflicts, and its data files are referenced by no version.
        if not meanwhile:
            meanwhile.append(1)
            options = {"allow_http": "true"}
            lance.write_dataset(
                pa.table({"id": [99]}), table.where, mode="overwrite", storage_options=options
            )
        return batch

    job = vane.range(3000).map_batches(
        overwritten_meanwhile, schema={"id": "BIGINT"}, batch_size=500
    )
    with pytest.raises(SinkError, match=r"committing .* failed"):
        table.write(job, "append", max_rows_per_file=1000)
    assert sorted(r["id"] for r in table.read().to_pylist()) == [99]
    listed = {key.split("/data/", 1)[1] for key in table.data_files(bucket)}
    assert listed == _referenced(table.where)  # before: the append's 3 files stayed


def test_an_index_that_cannot_be_built_on_s3_leaves_the_committed_rows(bucket, endpoint) -> None:
    # As on a local path: the index is built after the commit, and its failure once made the
    # abort remove the files of the version just committed.
    table = Table("lance", bucket, endpoint, {})
    rows = vane.sql("SELECT range AS id, [range, 1, 2, 3]::FLOAT[4] AS v FROM range(10)")
    with pytest.raises(SinkError, match="the rows were committed"):
        table.write(rows, "create", vector_index={"column": "v", "index_type": "IVF_PQ"})
    assert sorted(r["id"] for r in table.read().to_pylist()) == list(range(10))
    listed = {key.split("/data/", 1)[1] for key in table.data_files(bucket)}
    assert listed == _referenced(table.where)


def test_a_first_lance_write_killed_on_s3_does_not_block_the_next(bucket, endpoint) -> None:
    table = Table("lance", bucket, endpoint, {})
    # What a first write killed before its commit leaves: data files, and no version.
    lance.fragment.write_fragments(
        pa.table({"id": [1, 2, 3]}), table.where, storage_options={"allow_http": "true"}
    )
    assert table.data_files(bucket)
    assert table.write(vane.range(5), "create").rows == 5
    assert sorted(r["id"] for r in table.read().to_pylist()) == [0, 1, 2, 3, 4]
    listed = {key.split("/data/", 1)[1] for key in table.data_files(bucket)}
    assert listed == _referenced(table.where)  # the killed write's files went with it


DIMENSIONS = 32


def _embed(batch: pa.Table) -> pa.Table:
    """A small embedding model: each word hashed into one of DIMENSIONS buckets, the counts
    scaled to length 1 (the packaged MiniLM's first load alone takes 20 s on a busy 2-core
    machine; tests/integration/test_ai_local.py runs it)."""
    vectors = np.zeros((batch.num_rows, DIMENSIONS), dtype=np.float32)
    for row, text in enumerate(batch["text"].to_pylist()):
        for word in text.split():
            vectors[row, zlib.crc32(word.encode()) % DIMENSIONS] += 1.0
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMENSIONS)
    return batch.append_column("embedding", embedding)


def test_an_embedding_job_from_parquet_on_s3_ends_in_lance_on_s3(bucket, endpoint) -> None:
    """The product pages' pipeline: read_parquet on S3 -> an embedding model -> write_lance on
    S3 -> read back, and Lance's nearest-neighbour search finds a row by its vector."""
    texts = [f"document {i} about {('dogs', 'cooking', 'rockets')[i % 3]} {i}" for i in range(60)]
    docs = vane.from_pydict({"id": list(range(60)), "text": texts})
    docs.write_parquet(f"s3://{bucket}/docs/", rows_per_file=25)
    options = vane_options(endpoint)
    result = (
        vane.read_parquet(f"s3://{bucket}/docs/", storage_options=options)
        .map_batches(
            _embed,
            schema={"id": "BIGINT", "text": "VARCHAR", "embedding": f"FLOAT[{DIMENSIONS}]"},
            batch_size=16,
        )
        .write_lance(f"s3://{bucket}/docs.lance", storage_options=options)
    )
    assert result.rows == 60
    back = vane.read_lance(f"s3://{bucket}/docs.lance", storage_options=options)
    assert repr(back).startswith(
        f"Relation[id BIGINT, text VARCHAR, embedding FLOAT[{DIMENSIONS}]]"
    )
    assert back.count() == 60
    seven = back.filter("id = 7").to_pylist()[0]["embedding"]
    dataset = lance.dataset(f"s3://{bucket}/docs.lance", storage_options={"allow_http": "true"})
    hits = dataset.to_table(nearest={"column": "embedding", "q": seven, "k": 1})
    assert hits["id"].to_pylist() == [7]


def test_lance_options_in_the_librarys_own_spelling_still_work(bucket, endpoint) -> None:
    where = f"s3://{bucket}/native.lance"
    native = {"aws_endpoint": endpoint, "allow_http": "true", "aws_region": "us-east-1"}
    vane.range(5).write_lance(where, storage_options=native)
    assert vane.read_lance(where, storage_options=native).count() == 5


@pytest.fixture(scope="module")
def many_files(bucket: str, endpoint: str) -> Table:
    """A Delta table of many files, which the tests below only read (one write for both)."""
    table = Table("delta", bucket, endpoint, {})
    # 400,000 rows, a file a batch: ~390 files. With delta-rs's Python filesystem, a scan of
    # 40,000 (40 files) or 200,000 stopped at its first batch still exited cleanly.
    rows = vane.range(400_000).with_column("s", "repeat('x', 20)")
    rows.write_deltalake(table.where, target_file_size=1, storage_options=vane_options(endpoint))
    return table


@pytest.mark.parametrize("spelling", ["vane", "delta-rs"])
def test_a_process_that_read_a_delta_table_on_s3_exits_cleanly(
    bucket: str, endpoint: str, many_files: Table, tmp_path: Path, spelling: str
) -> None:
    # Arrow's own S3 filesystem reads the table's files (delta-rs's is Python, called from
    # Arrow's threads: a scan stopped early crashed or hung the process as it exited), with the
    # options in vane's spelling or in delta-rs's own (object_store's names, any case).
    table = many_files
    options = vane_options(endpoint)
    assert len(table.data_files(bucket)) >= 16  # a file a batch: reads in flight if stopped
    if spelling == "delta-rs":
        options = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "aws_access_key_id": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "aws_region": "us-east-1",
            "timeout": "30s",
        }
    for way in ("limit", "first batch", "count"):
        read_and_exit("delta", table.where, way, {"storage_options": options}, tmp_path)


def test_a_local_path_is_unaffected(tmp_path: Path) -> None:
    vane.range(3).write_deltalake(str(tmp_path / "t"), storage_options=None)
    assert vane.read_deltalake(str(tmp_path / "t")).count() == 3


def _doubled(batch: pa.Table) -> pa.Table:
    ids = batch["id"]
    return pa.table({"id": ids, "twice": pa.compute.multiply(ids, 2)})


@pytest.mark.ray
# ray.init forks the test process, which imported lance
@pytest.mark.filterwarnings("ignore:lance is not fork-safe", "ignore::DeprecationWarning")
def test_a_delta_table_on_s3_mapped_on_ray_into_lance_on_s3(bucket, endpoint, on_ray) -> None:
    """On the Ray runner: a Delta table on S3 read on the driver, mapped on Ray actors, written
    as Lance fragments by Ray tasks and committed by the driver, the options (in vane's
    spelling) reaching the tasks. (Iceberg's driver-side read on Ray is tested on local paths,
    test_table_formats.py; its S3 options reach the tasks as Lance's do, in the writer.)"""
    delta = Table("delta", bucket, endpoint, {})
    target = Table("lance", bucket, endpoint, {})
    options = vane_options(endpoint)
    delta.write(vane.range(2000), "error", storage_options=options)  # no UDF: runs locally
    mapped = (
        delta.read(storage_options=options)
        .filter("id < 1000")
        .map_batches(
            _doubled,
            schema={"id": "BIGINT", "twice": "BIGINT"},
            batch_size=250,
            execution_backend="ray_actor",
        )
    )
    assert target.write(mapped, "create", storage_options=options).rows == 1000
    got = target.read(storage_options=options).to_pylist()
    assert sorted((r["id"], r["twice"]) for r in got) == [(i, 2 * i) for i in range(1000)]
