"""How many requests a read of objects costs, counted by the S3 server that answered them
(moto's, on 127.0.0.1), and that a read never mixes objects listed with objects changed since.

A plan lists its prefix once and keeps what the listing says of each object (its size and
time) in its scan: reading the footers, DuckDB's binding and every action reuse it, so no
object's size is asked (no HEAD request), and an object's last block (a small file whole, a
big one's footer) is fetched once however many times DuckDB opens it. Each action lists the
prefix once more, to fail (not mix) where an object changed since the plan was built.

Before (the same reads, counted the same way): building the plan of a 5-file Parquet prefix
and one ``to_arrow`` cost 9 listings, 26 HEAD and 19 GET requests; JSON 28 GETs more."""

from __future__ import annotations

import collections
import io
import json
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vane
from tests.s3_server import ACCESS_KEY, SECRET_KEY, Request, local_s3
from vane.errors import SourceError

pytest.importorskip("moto.server")
botocore_session = pytest.importorskip("botocore.session")

REQUESTS: list[Request] = []
FILES = 5


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    with local_s3(requests=REQUESTS) as url:
        yield botocore_session.get_session().create_client("s3", endpoint_url=url)


@pytest.fixture
def bucket(client) -> str:
    name = f"b-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name)
    return name


def _table(i: int) -> pa.Table:
    return pa.table({"id": list(range(i * 10, i * 10 + 10)), "s": [f"x{j}" for j in range(10)]})


def _put(client, bucket: str, key: str, table: pa.Table, fmt: str) -> None:
    if fmt == "parquet":
        body = _bytes(table)
    else:
        body = "".join(json.dumps(r) + "\n" for r in table.to_pylist()).encode()
    client.put_object(Bucket=bucket, Key=key, Body=body)


def _counted() -> dict[str, int]:
    """The requests served since the last count, by kind."""
    kinds = collections.Counter(r.kind for r in REQUESTS)
    REQUESTS.clear()
    return {kind: kinds[kind] for kind in ("LIST", "HEAD", "GET")}


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_a_prefix_read_lists_once_asks_no_size_and_gets_each_object_once(client, bucket, fmt):
    ext = "parquet" if fmt == "parquet" else "jsonl"
    for i in range(FILES):
        _put(client, bucket, f"prefix/f{i}.{ext}", _table(i), fmt)
    read = vane.read_parquet if fmt == "parquet" else vane.read_json
    REQUESTS.clear()
    rel = read(f"s3://{bucket}/prefix/")
    # The prefix, then the bucket's root for a vane write root above it (a log, a write).
    assert _counted() == {"LIST": 2, "HEAD": 0, "GET": FILES}
    assert rel.to_arrow().num_rows == 10 * FILES
    # The action's check that nothing changed; the objects were read already (each a block).
    action = _counted()
    assert action["LIST"] == 1 and action["HEAD"] == 0 and action["GET"] <= FILES
    assert rel.filter("id > 3").select("id").count() == 10 * FILES - 4
    action = _counted()
    assert action["LIST"] == 1 and action["HEAD"] == 0 and action["GET"] <= FILES
    if fmt == "json":  # types= makes the scan detect the other columns: from the kept blocks
        typed = read(f"s3://{bucket}/prefix/", types={"id": "BIGINT"}, columns=["id"])
        assert _counted() == {"LIST": 2, "HEAD": 0, "GET": 0}
        assert typed.count() == 10 * FILES


def test_a_list_of_urls_asks_each_object_once_and_their_prefixes_once(client, bucket):
    """Each URL is one HEAD request (which says its size and ETag); whether the prefixes
    above them are vane write roots is asked once for all (before: 32 listings, 15 HEAD
    requests for 5 URLs)."""
    for i in range(FILES):
        _put(client, bucket, f"a/b/f{i}.parquet", _table(i), "parquet")
    REQUESTS.clear()
    rel = vane.read_parquet([f"s3://{bucket}/a/b/f{i}.parquet" for i in range(FILES)])
    # a/b/, a/ and the bucket's root, each asked once
    assert _counted() == {"LIST": 3, "HEAD": FILES, "GET": FILES}
    assert rel.count() == 10 * FILES
    assert _counted()["HEAD"] == 0  # the check before the action is one listing


def test_an_object_changed_after_the_plan_fails_the_action(client, bucket):
    for i in range(FILES):
        _put(client, bucket, f"p/f{i}.parquet", _table(i), "parquet")
    rel = vane.read_parquet(f"s3://{bucket}/p/")
    _put(client, bucket, "p/f3.parquet", _table(7).slice(0, 5), "parquet")  # another size
    with pytest.raises(SourceError, match=r"f3.parquet' changed since the relation was built"):
        rel.to_arrow()
    client.delete_object(Bucket=bucket, Key="p/f1.parquet")
    with pytest.raises(SourceError, match=r"f1.parquet' no longer exists"):
        rel.count()
    again = vane.read_parquet(f"s3://{bucket}/p/")  # built anew: what is there now
    assert again.count() == 10 * (FILES - 2) + 5


def test_an_object_replaced_by_one_of_the_same_size_is_told_by_its_etag(client, bucket):
    """Replaced within the second by as many bytes, an object keeps its size and its listed
    time (to the second): its ETag, which is part of its stamp, tells it apart."""
    from vane.io.files import resolve_files

    for i in range(FILES):
        _put(client, bucket, f"e/f{i}.parquet", _table(i), "parquet")
    url = f"s3://{bucket}/e/f2.parquet"
    rel = vane.read_parquet(f"s3://{bucket}/e/")
    before = resolve_files(f"s3://{bucket}/e/", "parquet", "read_parquet").stamps or {}
    same = _table(2).set_column(1, "s", pa.array([f"y{j}" for j in range(10)]))
    _put(client, bucket, "e/f2.parquet", same, "parquet")
    after = resolve_files(f"s3://{bucket}/e/", "parquet", "read_parquet").stamps or {}
    assert after[url][2] == before[url][2]  # the same size
    assert after[url][1] != before[url][1]  # another ETag
    with pytest.raises(SourceError, match=r"f2.parquet' changed since the relation was built"):
        rel.to_arrow()


def test_a_read_names_the_etag_its_object_was_listed_with(client, bucket):
    """An object replaced between the check before an action and its read fails the read
    (S3's If-Match), rather than giving bytes of another version."""
    from vane.io import s3_objects
    from vane.io.storage import locate, open_object

    _put(client, bucket, "r/one.parquet", _table(1), "parquet")
    where = locate(f"s3://{bucket}/r/one.parquet")
    [info], etags = s3_objects.list_objects(where.store, f"{bucket}/r")
    _put(client, bucket, "r/one.parquet", _table(2), "parquet")
    with (
        open_object(where.store, info, etags[info.path]) as handle,
        pytest.raises(SourceError, match="changed since it was listed"),
    ):
        handle.read()


def test_a_prefix_inside_a_vane_write_reads_what_its_manifests_name(client, bucket):
    """The prefixes above the one read are asked whether they are vane write roots (one
    listing request each): under one, an object its manifests do not name is not read."""
    vane.range(20).select("id", "id % 2 AS k").write_parquet(
        f"s3://{bucket}/root/", partition_by="k"
    )
    _put(client, bucket, "root/k=1/stray.parquet", _table(9), "parquet")  # no manifest names it
    REQUESTS.clear()
    rel = vane.read_parquet(f"s3://{bucket}/root/k=1/")
    # the prefix; root/ and the bucket's root; root/'s log, whose manifests it reads
    assert _counted()["LIST"] == 1 + 2 + 1
    assert sorted(rel.to_arrow().column("id").to_pylist()) == list(range(1, 20, 2))


def _doubled(batch: pa.Table) -> pa.Table:
    return pa.table({"id": batch["id"], "twice": pa.compute.multiply(batch["id"], 2)})


@pytest.mark.ray
def test_ray_tasks_read_their_share_with_one_check_and_one_get_per_object(client, bucket, on_ray):
    """Each Ray task checks its share of the objects (one listing request, of the keys from
    its first object to its last; a worker process that checked the share lately does not
    again), which tells its DuckDB what they are: binding and reading the share then fetch each
    object once. Before: 50 HEAD and 15 GET requests for 5 small objects."""
    for i in range(FILES):
        _put(client, bucket, f"ray/f{i}.parquet", _table(i), "parquet")
    # The session's Ray workers may predate the server and the variables that point at it.
    options = {"endpoint_url": client.meta.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}
    rel = vane.read_parquet(f"s3://{bucket}/ray/", storage_options=options)
    REQUESTS.clear()
    mapped = rel.map_batches(
        _doubled,
        schema={"id": "BIGINT", "twice": "BIGINT"},
        batch_size=10,
        execution_backend="ray_actor",
    )
    assert sorted(mapped.to_arrow().column("twice").to_pylist()) == [
        2 * i for i in range(10 * FILES)
    ]
    served = _counted()
    # The first share is read slow-start, in several small tasks (docs/ray.md): each of the
    # cluster's 4 worker processes that takes one checks it and fetches its objects once.
    assert served["HEAD"] == 0
    assert served["LIST"] <= FILES + 3 and served["GET"] <= FILES + 3


def _bytes(table: pa.Table) -> bytes:
    body = io.BytesIO()
    pq.write_table(table, body)
    return body.getvalue()


def test_listing_more_than_a_page_of_objects_takes_two_requests(client, bucket):
    """S3 answers a listing 1,000 keys a page: 1,001 objects are 2 listing requests, and the
    check before an action 2 more; no object is asked for alone."""
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    from vane.io.files import resolve_files
    from vane.io.readers import stamps

    # Put straight into the server's store (it runs in this process), as its PUT handler does:
    # 1,001 PUT requests took 12 s of the test's 13, and what is counted here is the listing.
    store = get_backend("s3")[DEFAULT_ACCOUNT_ID]["aws"]
    for i in range(1001):
        store.put_object(bucket, f"many/{i:04}.csv", b"a\n1\n")
    listed = client.list_objects_v2(Bucket=bucket, Prefix="many/")
    assert listed["IsTruncated"] and listed["KeyCount"] == 1000  # as the server lists them
    REQUESTS.clear()
    found = resolve_files(f"s3://{bucket}/many/", "csv", "read_csv")
    assert len(found.files) == 1001 and found.stamps is not None and len(found.stamps) == 1001
    assert _counted() == {"LIST": 2 + 1, "HEAD": 0, "GET": 0}  # 2 pages, the bucket's root
    assert stamps(found.files, found.storage) == found.stamps
    assert _counted() == {"LIST": 2, "HEAD": 0, "GET": 0}
