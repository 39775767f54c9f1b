"""Remote paths against real parts: moto's S3 server on 127.0.0.1 (started once for the module,
reached through AWS_ENDPOINT_URL with fake credentials, as users reach MinIO or R2), a small
fault-injecting HTTP proxy in front of it, and fsspec's in-memory filesystem for the generic
path that every other protocol takes. The object-store commit protocol is checked with real
writer processes SIGKILLed at each step and at random instants, and with concurrent writers."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vane
from tests.s3_server import Request, local_s3
from vane.errors import (
    SinkError,
    SourceNotFoundError,
    StorageAccessError,
    StorageError,
    StorageNotFoundError,
)
from vane.io import storage

ROOT = Path(__file__).resolve().parents[2]
moto_server = pytest.importorskip("moto.server")
botocore_session = pytest.importorskip("botocore.session")


# Every request the S3 server answers, as it arrives (a test clears it before what it counts).
REQUESTS: list[Request] = []


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with local_s3(requests=REQUESTS) as url:
        yield url


@pytest.fixture(scope="module")
def client(endpoint: str) -> object:
    return botocore_session.get_session().create_client("s3", endpoint_url=endpoint)


@pytest.fixture
def bucket(client) -> str:
    name = f"b-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name)
    return name


def _keys(client, bucket: str, prefix: str = "") -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    # pyarrow keeps an emptied "directory" as a key ending in "/": not data, not a leftover
    return sorted(o["Key"] for o in listed.get("Contents", []) if not o["Key"].endswith("/"))


def _ids(rel: vane.Relation) -> list[int]:
    return sorted(r["id"] for r in rel.select("id").to_pylist())


# ---- reads and writes ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_each_format_round_trips_through_s3(bucket, fmt):
    rel = vane.range(50).select("id", "'v' || id AS text", "id % 3 AS k")
    result = getattr(rel, f"write_{fmt}")(f"s3://{bucket}/out/", rows_per_file=20)
    assert result.rows == 50 and result.files == 3
    back = getattr(vane, f"read_{fmt}")(f"s3://{bucket}/out/")
    assert back.order_by("id").to_pylist() == rel.to_pylist()


def test_prefixes_globs_lists_hive_partitions_and_projection(bucket):
    rel = vane.range(30).select("id", "id % 3 AS k", "id * 2 AS twice")
    rel.write_parquet(f"s3://{bucket}/p/", partition_by="k")
    whole = vane.read_parquet(f"s3://{bucket}/p/")
    assert sorted(whole.schema.names) == ["id", "k", "twice"]  # hive column found
    assert whole.filter("k = 1").count() == 10
    assert _ids(vane.read_parquet(f"s3://{bucket}/p/k=2/")) == list(range(2, 30, 3))
    assert vane.read_parquet(f"s3://{bucket}/p/*/*.parquet").count() == 30
    assert vane.read_parquet(f"s3://{bucket}/**/*.parquet").count() == 30
    listed = [f"s3://{bucket}/p/k=0/", f"s3://{bucket}/p/k=1/"]
    assert vane.read_parquet(listed).count() == 20
    assert vane.read_parquet(f"s3://{bucket}/p/", columns=["twice"]).schema.names == ["twice"]
    rel.write_parquet(f"s3://{bucket}/one.parquet")
    assert vane.read_parquet(f"s3://{bucket}/one.parquet").count() == 30
    assert "s3://" in vane.read_parquet(f"s3://{bucket}/p/").explain()


def test_a_scan_of_objects_keeps_no_copy_of_what_it_read_in_duckdb(bucket):
    """DuckDB's external file cache keeps what a scan read of each remote object until the
    query ends: in the benchmark's store pipeline, about 8 MiB an object of 10M rows (83 MiB
    over ten objects), and the peak grew from 370 MiB over one object to 530 MiB over ten; 345
    and 375 MiB with it off, as fast. Objects this small leave too little in it to see from
    a UDF, so what is checked is that the scans' cursors have it off, and that no entry is
    left once a scan has run."""
    from vane import _engine

    vane.range(1_000).select("id", "md5(id::VARCHAR) AS text").write_parquet(
        f"s3://{bucket}/big/", rows_per_file=250
    )
    assert vane.read_parquet(f"s3://{bucket}/big/").count() == 1_000
    cursor = _engine.cursor()
    try:
        setting = "SELECT current_setting('enable_external_file_cache')"
        assert cursor.sql(setting).fetchall() == [(False,)]
        assert cursor.sql("SELECT * FROM duckdb_external_file_cache()").fetchall() == []
    finally:
        cursor.close()


def test_a_big_write_streams_as_a_multipart_upload(bucket, client):
    # ~14 MB of Parquet: pyarrow's S3 stream uploads it in parts as it is written.
    rel = vane.range(600_000).select("id", "random() AS a", "random() AS b")
    result = rel.write_parquet(f"s3://{bucket}/big/")
    assert result.bytes > 10 * 2**20
    (key,) = [k for k in _keys(client, bucket, "big/") if k.endswith(".parquet")]
    assert "-" in client.head_object(Bucket=bucket, Key=key)["ETag"]  # "<md5>-<parts>"
    assert vane.read_parquet(f"s3://{bucket}/big/").filter("id % 1000 = 0").count() == 600


def test_storage_options_per_call_and_configured(bucket, endpoint, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing-secret-value"}
    vane.range(5).write_parquet(f"s3://{bucket}/o/", storage_options=options)
    assert vane.read_parquet(f"s3://{bucket}/o/", storage_options=options).count() == 5
    vane.configure(storage_options={"s3": {"client_kwargs": {"endpoint_url": endpoint}}})
    try:
        assert vane.read_parquet(f"s3://{bucket}/o/").count() == 5
    finally:
        vane.configure(storage_options={})


# ---- the commit protocol -------------------------------------------------------------------------


def test_overwrite_append_and_error_modes(bucket, client):
    url = f"s3://{bucket}/m/"
    vane.range(3).write_parquet(url)
    with pytest.raises(SinkError, match="already exists"):
        vane.range(3).write_parquet(url)
    vane.range(3).select("id + 10 AS id").write_parquet(url, mode="append")
    assert _ids(vane.read_parquet(url)) == [0, 1, 2, 10, 11, 12]
    vane.range(2).select("id + 100 AS id").write_parquet(url, mode="overwrite")
    assert _ids(vane.read_parquet(url)) == [100, 101]
    data = [k for k in _keys(client, bucket, "m/") if k.endswith(".parquet")]
    assert len(data) == 1  # the files the overwrite replaced are gone


def test_append_to_a_prefix_that_other_tools_wrote_keeps_their_files(bucket):
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs = vane.io.storage.locate(f"s3://{bucket}/x").store.filesystem()
    with fs.open_output_stream(f"{bucket}/theirs/data.parquet") as out:
        pq.write_table(pa.table({"id": [7, 8]}), out)
    vane.range(2).write_parquet(f"s3://{bucket}/theirs/", mode="append")
    assert _ids(vane.read_parquet(f"s3://{bucket}/theirs/")) == [0, 1, 7, 8]


WRITE = textwrap.dedent(
    """
    import sys, vane
    vane.configure(progress=False)
    url, mode, start, rows = sys.argv[1:5]
    rel = vane.range(int(rows)).select(f"id + {int(start)} AS id", "id % 4 AS k")
    rel.write_parquet(url, mode=mode, partition_by="k", rows_per_file=max(1, int(rows) // 8))
    """
)


def _writer(url: str, mode: str, start: int, rows: int, pause: str = "") -> subprocess.Popen:
    env = dict(os.environ, VANE_COMMIT_PAUSE=pause, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", WRITE, url, mode, str(start), str(rows)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for(marker: Path, process: subprocess.Popen) -> None:
    while not marker.exists():
        if process.poll() is not None:
            raise AssertionError(process.stderr.read().decode() if process.stderr else "died")
        time.sleep(0.02)


@pytest.mark.parametrize(("step", "committed"), [("staged", False), ("committed", True)])
def test_a_writer_killed_at_each_step_leaves_all_or_nothing(
    bucket, client, tmp_path, step, committed
):
    url = f"s3://{bucket}/k/"
    vane.range(8).select("id", "id % 4 AS k").write_parquet(url, partition_by="k")  # ids 0..7
    marker = tmp_path / "paused"
    process = _writer(url, "append", 1000, 80, pause=f"remote-{step}:{marker}")
    _wait_for(marker, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    expected = list(range(8)) + (list(range(1000, 1080)) if committed else [])
    assert _ids(vane.read_parquet(url)) == expected
    # The next write removes what the dead one left (its marker, its parts if uncommitted).
    vane.range(1).select("id + 5000 AS id", "0 AS k").write_parquet(
        url, mode="append", partition_by="k"
    )
    keys = _keys(client, bucket, "k/")
    assert not [k for k in keys if "_vane_writes/" in k]
    data = [k for k in keys if k.endswith(".parquet")]
    assert len(data) == 4 + 1 + (8 if committed else 0)  # the dead write's 8 parts if committed
    assert _ids(vane.read_parquet(url)) == sorted([*expected, 5000])


def test_a_write_committing_while_another_cleans_up_keeps_its_files(bucket, tmp_path):
    """Writer A lists the prefix's files (B's parts among them) and is held before it lists
    the markers; B commits and removes its marker meanwhile. A must find B's manifest, not take
    B's files for a dead write's leftovers."""
    url = f"s3://{bucket}/race/"
    vane.range(8).select("id", "id % 4 AS k").write_parquet(url, partition_by="k")  # ids 0..7
    b_paused, a_paused = tmp_path / "b", tmp_path / "a"
    b = _writer(url, "append", 1000, 80, pause=f"remote-staged:{b_paused}")
    _wait_for(b_paused, b)
    a = _writer(url, "append", 2000, 8, pause=f"remote-cleaning:{a_paused}")
    _wait_for(a_paused, a)
    b_paused.unlink()  # B commits and ends
    assert b.wait() == 0, b.stderr.read().decode() if b.stderr else ""
    a_paused.unlink()
    assert a.wait() == 0, a.stderr.read().decode() if a.stderr else ""
    expected = [*range(8), *range(1000, 1080), *range(2000, 2008)]
    assert _ids(vane.read_parquet(url)) == expected


def test_a_first_write_killed_before_its_commit_leaves_nothing(bucket, client, tmp_path):
    url = f"s3://{bucket}/first/"
    marker = tmp_path / "paused"
    process = _writer(url, "error", 0, 80, pause=f"remote-staged:{marker}")
    _wait_for(marker, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert any(k.endswith(".parquet") for k in _keys(client, bucket, "first/"))  # its parts
    with pytest.raises(SourceNotFoundError):  # ... which no vane reader reads
        vane.read_parquet(url)
    vane.range(3).select("id", "0 AS k").write_parquet(url, partition_by="k")  # not "exists"
    assert _ids(vane.read_parquet(url)) == [0, 1, 2]
    assert len([k for k in _keys(client, bucket, "first/") if k.endswith(".parquet")]) == 1


def test_writers_killed_at_random_instants_leave_all_or_nothing(bucket):
    url = f"s3://{bucket}/r/"
    vane.range(4).select("id", "id % 4 AS k").write_parquet(url, partition_by="k")
    before = list(range(4))
    chance = random.Random(27)
    for attempt in range(2):
        start = 10_000 * (attempt + 1)
        process = _writer(url, "append", start, 4000)
        time.sleep(chance.uniform(0.3, 2.5))  # anywhere from start-up to after the commit
        process.send_signal(signal.SIGKILL)
        process.wait()
        seen = _ids(vane.read_parquet(url))
        new = [i for i in seen if i >= start]
        assert new in ([], list(range(start, start + 4000)))
        assert [i for i in seen if i < start] == before
        before = seen


def test_concurrent_writers_each_commit_whole(bucket):
    url = f"s3://{bucket}/c/"
    vane.range(1).select("id - 1 AS id", "0 AS k").write_parquet(url, partition_by="k")
    writers = [_writer(url, "append", 1000 * (n + 1), 40) for n in range(2)]
    for process in writers:
        assert process.wait(timeout=120) == 0, process.stderr.read().decode()
    expected = [-1, *[i for n in range(2) for i in range(1000 * (n + 1), 1000 * (n + 1) + 40)]]
    assert _ids(vane.read_parquet(url)) == sorted(expected)


def test_of_two_writers_creating_one_prefix_exactly_one_wins(bucket):
    url = f"s3://{bucket}/e/"
    outcomes: list[object] = []

    def write(start: int) -> None:
        try:
            vane.range(20).select(f"id + {start} AS id").write_parquet(url)
            outcomes.append(start)
        except SinkError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in (0, 100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if isinstance(o, int)]
    assert len(winners) == 1, outcomes
    assert _ids(vane.read_parquet(url)) == list(range(winners[0], winners[0] + 20))


# ---- the generic path: any fsspec protocol -------------------------------------------------------


def test_a_commit_lists_its_prefix_a_bounded_number_of_times(bucket, client):
    """Counted at the server: a write lists its prefix a few times, however many files it
    writes (before: 13 listings for a first write, 7 for an append or an overwrite; now 5, 3
    and 3), asks no object's size (its stream counted it), and removes what an overwrite
    replaced in one request."""
    rel = vane.range(1000).select("id", "id % 4 AS k")
    where = f"s3://{bucket}/counted/"

    def counted(mode: str, files: int) -> dict[str, int]:
        REQUESTS.clear()
        rel.write_parquet(where, mode=mode, rows_per_file=1000 // files)
        kinds = [r.kind for r in REQUESTS]
        return {
            "lists": kinds.count("LIST"),
            "heads of parts": sum(r.kind == "HEAD" and "/part-" in r.path for r in REQUESTS),
            "deletes": kinds.count("DELETE") + sum("delete" in r.query for r in REQUESTS),
        }

    first = counted("error", 10)
    assert first["lists"] <= 5 and first["heads of parts"] == 0
    for files in (1, 10):
        append = counted("append", files)
        assert append["lists"] <= 3 and append["heads of parts"] == 0
    overwrite = counted("overwrite", 10)  # replaces 21 files
    assert overwrite["lists"] <= 3 and overwrite["deletes"] <= 2
    assert vane.read_parquet(where).count() == 1000
    assert len(_keys(client, bucket, "counted/part-")) == 10  # the replaced ones are gone


def test_memory_filesystem_reads_writes_and_commits():
    url = f"memory://vane-{uuid.uuid4().hex[:8]}/out/"
    rel = vane.range(12).select("id", "id % 2 AS k")
    rel.write_json(url, partition_by="k")
    assert vane.read_json(url).count() == 12
    rel.write_json(url, mode="append", partition_by="k")
    assert vane.read_json(url).count() == 24
    rel.limit(3).write_json(url, mode="overwrite")
    assert _ids(vane.read_json(url)) == [0, 1, 2]
    with pytest.raises(SinkError, match="already exists"):
        rel.write_json(url)


def test_http_urls_read_files_index_pages_and_partitions(tmp_path):
    pytest.importorskip("aiohttp")  # fsspec's http filesystem
    rel = vane.range(10).select("id", "id % 2 AS k")
    rel.write_parquet(str(tmp_path / "d"), partition_by="k")
    rel.write_csv(str(tmp_path / "x.csv"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)  # type: ignore[misc]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert vane.read_csv(f"{base}/x.csv").order_by("id").to_pylist() == rel.to_pylist()
        assert vane.read_parquet(f"{base}/d/").filter("k = 1").count() == 5  # an index page
        assert _ids(vane.read_parquet(f"{base}/d/k=0/")) == [0, 2, 4, 6, 8]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _file_server(
    data: bytes, *, ranges: bool = True, faults: list[str] | None = None, dynamic: bool = False
) -> Iterator[tuple[str, list[tuple[str, str, str | None]], list[str]]]:
    """An HTTP server of one file, ``/f.parquet`` (``data``), on 127.0.0.1: its URL, and the
    requests it had (method, path, Range). ``ranges=False``: it answers every range with the
    whole file, as some servers do. ``faults``: what it does to the next ranged GETs instead
    of answering them ("503", "reset", "short": half the body, then the connection closed, or
    "stall": the headers, then nothing until the server stops; "503 unranged" is for the next
    request that names no range instead: a HEAD, or fsspec's GET when a HEAD failed); those
    it has not met yet are the third thing it yields. ``dynamic``: each answer has a time and
    an ETag of its own, as a generated page's, or one of several servers behind one name, may."""
    requests: list[tuple[str, str, str | None]] = []
    plan = list(faults or [])
    stopping = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, body: bool) -> None:
            wanted = self.headers.get("Range")
            requests.append((self.command, self.path, wanted))
            if self.path != "/f.parquet":
                self.send_error(404)
                return
            fault = plan.pop(0) if wanted and body and plan else None
            if not wanted and plan and plan[0] == "503 unranged":
                fault = plan.pop(0).split()[0]
            if fault == "reset":
                self.connection.shutdown(2)
                self.close_connection = True
                return
            if fault == "503":
                self.send_error(503)
                return
            start, end = 0, len(data) - 1
            if wanted and ranges:
                first, _, last = wanted.removeprefix("bytes=").partition("-")
                start, end = int(first), min(int(last or end), end)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            if dynamic:
                self.send_header("Last-Modified", self.date_time_string())
                self.send_header("ETag", f'"{len(requests)}"')
            else:
                self.send_header("Last-Modified", "Wed, 21 Oct 2026 07:28:00 GMT")  # as nginx's
                self.send_header("ETag", '"6532a6d0-1f4"')
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            if fault == "short":
                self.wfile.write(data[start : start + (end - start + 1) // 2])
                self.close_connection = True
            elif fault == "stall":
                self.wfile.flush()
                stopping.wait()
                self.close_connection = True
            elif body:
                self.wfile.write(data[start : end + 1])

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/f.parquet", requests, plan
    finally:
        stopping.set()
        server.shutdown()
        server.server_close()


def _parquet_bytes(tmp_path: Path, rows: int) -> tuple[pa.Table, bytes]:
    table = pa.table({"id": pa.array(range(rows)), "t": [f"row {i}" for i in range(rows)]})
    pq.write_table(table, tmp_path / "f.parquet", row_group_size=max(1, rows // 6))
    return table, (tmp_path / "f.parquet").read_bytes()


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "server ignores ranges"])
def test_an_http_file_is_read_by_ranges_and_never_fetched_whole(tmp_path, ranges):
    """Every GET of a file read over HTTP names a range: fsspec's file opening asked first
    whether the URL is a file, a GET of the whole body, at each of DuckDB's opens. A server
    that answers every range with the whole file is read right all the same."""
    pytest.importorskip("aiohttp")  # fsspec's http filesystem
    rows = 600_000
    table, data = _parquet_bytes(tmp_path, rows)
    assert len(data) > storage.RANGE_BLOCK  # (several row groups, more than a block)
    with _file_server(data, ranges=ranges) as (url, requests, _):
        assert vane.read_parquet(url).count() == rows
        assert vane.read_parquet(url).to_arrow().equals(table)
        assert vane.read_parquet(url).filter("id % 1000 = 7").count() == rows // 1000
    whole = [r for r in requests if r[0] == "GET" and r[1] == "/f.parquet" and r[2] is None]
    assert whole == []
    assert any(r[2] for r in requests)  # (the file was read, by ranges)


@pytest.mark.parametrize("fault", ["503", "reset", "short"])
def test_an_http_read_that_fails_for_a_moment_is_tried_again(tmp_path, fault):
    pytest.importorskip("aiohttp")
    table, data = _parquet_bytes(tmp_path, 600_000)
    faults = [fault] * (storage.FSSPEC_ATTEMPTS - 1)  # the last try of a read gets through
    with _file_server(data, faults=faults) as (url, _, unmet):
        assert vane.read_parquet(url).to_arrow().equals(table)
    assert unmet == []  # every fault was met, and tried past


def test_an_http_read_that_keeps_failing_is_a_storage_error_naming_the_url(tmp_path):
    pytest.importorskip("aiohttp")
    _, data = _parquet_bytes(tmp_path, 1_000)
    server = _file_server(data, faults=["503"] * 1_000)
    with server as (url, requests, _), pytest.raises(vane.errors.VaneError) as raised:
        vane.read_parquet(url).to_arrow()
    message = str(raised.value)  # (a SourceError naming the scan, then the store's error)
    assert f"cannot read {url} failed after vane's retries: 503" in message
    assert "Traceback" not in message
    ranged = [r for r in requests if r[0] == "GET" and r[2]]
    assert len(ranged) >= storage.FSSPEC_ATTEMPTS  # tried again, and given up on


def test_one_http_file_is_asked_about_once_and_its_footer_read_once(tmp_path, monkeypatch):
    """Its HEAD says the size, time and ETag, kept as a listing's would be: DuckDB's opens ask
    nothing more, its readers share the file's last block (the footer), and whether a vane
    write root holds it costs one request per name (not a folder check and an existence check
    each), none above the host. Each of these was asked again before: 13 requests, now 4."""
    pytest.importorskip("aiohttp")
    monkeypatch.setattr(storage, "_INFO_SECONDS", 10**6)  # (nothing here depends on time)
    _, data = _parquet_bytes(tmp_path, 1_000)
    assert len(data) < storage.RANGE_BLOCK  # one block: the whole file is its footer's
    with _file_server(data) as (url, requests, _):
        read = vane.read_parquet(url)
        built = list(requests)
        assert read.count() == 1_000
    assert [r[0] for r in built if r[1] == "/f.parquet"] == ["HEAD", "GET"]
    assert sorted(r[1] for r in built if r[1] != "/f.parquet") == ["/_vane_log", "/_vane_writes"]
    # the action checks the file is still the one the relation was built on, and reads nothing
    assert requests[len(built) :] == [("HEAD", "/f.parquet", None)]


def test_an_http_file_whose_time_and_etag_change_with_every_answer_is_not_changed(
    tmp_path, monkeypatch
):
    # Over HTTP a file is known by its size: a time or an ETag of each answer's own would make
    # every action find it "changed since the relation was built".
    pytest.importorskip("aiohttp")
    monkeypatch.setattr(storage, "_INFO_SECONDS", 10**6)  # (nothing here depends on time)
    table, data = _parquet_bytes(tmp_path, 1_000)
    with _file_server(data, dynamic=True) as (url, requests, _):
        read = vane.read_parquet(url)
        assert read.to_arrow().equals(table)
        assert read.count() == 1_000
    # asked when the relation was built, then by each action, each answer different
    assert [r[0] for r in requests].count("HEAD") == 3


def test_an_http_server_that_stalls_fails_the_read_within_its_timeout_and_attempts(tmp_path):
    """A server that answers the headers and then nothing: each try waits ``request_timeout``
    for the body (not aiohttp's five minutes for a whole answer), ``max_attempts`` tries in
    all, and the read ends in an error saying what to check; a footer that could not be read
    is not asked for again by DuckDB's read."""
    pytest.importorskip("aiohttp")
    _, data = _parquet_bytes(tmp_path, 1_000)
    options = {"request_timeout": "2s", "max_attempts": 2}  # (the stall never ends)
    server = _file_server(data, faults=["stall"] * 1_000)
    with server as (url, requests, _), pytest.raises(vane.errors.StorageError) as raised:
        vane.read_parquet(url, storage_options=options).count()
    message = str(raised.value)
    assert f"cannot read {url}: the store could not be reached after 2 attempts" in message
    assert "request_timeout" in message  # how to allow a slow store longer
    assert len([r for r in requests if r[0] == "GET" and r[2]]) == 2


def test_an_http_url_that_cannot_be_asked_about_is_not_called_missing(tmp_path):
    """fsspec's HTTP filesystem says "not found" for whatever failed: only a 404 is missing;
    a server in error, one that cannot be reached and an option aiohttp refuses say so."""
    pytest.importorskip("aiohttp")

    class Failing(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.send_error(500 if self.path == "/f.parquet" else 404)

        do_GET = do_HEAD

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(vane.errors.StorageError, match=f"cannot list {base}/f.parquet.*500"):
            vane.read_parquet(f"{base}/f.parquet")
        with pytest.raises(vane.errors.SourceNotFoundError, match="matches no parquet object"):
            vane.read_parquet(f"{base}/g.parquet")
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(vane.errors.StorageError, match="could not be reached"):
        vane.read_parquet(f"{base}/f.parquet", storage_options={"connect_timeout": 1})
    _, data = _parquet_bytes(tmp_path, 10)
    refused = pytest.raises(vane.errors.ConfigurationError, match="'bogus'")
    with _file_server(data) as (url, _, _), refused as raised:
        vane.read_parquet(url, storage_options={"bogus": "s3cr3t"})
    assert "s3cr3t" not in str(raised.value)


def test_an_http_file_whose_head_fails_for_a_moment_is_asked_again(tmp_path):
    pytest.importorskip("aiohttp")
    table, data = _parquet_bytes(tmp_path, 1_000)
    # fsspec asks with a HEAD, then a GET: both fail once, and vane asks again
    with _file_server(data, faults=["503 unranged"] * 2) as (url, _, unmet):
        assert vane.read_parquet(url).to_arrow().equals(table)  # not a StorageError
    assert unmet == []


def test_an_http_read_that_stalls_once_is_tried_again(tmp_path):
    pytest.importorskip("aiohttp")
    table, data = _parquet_bytes(tmp_path, 1_000)
    with _file_server(data, faults=["stall"]) as (url, _, unmet):
        read = vane.read_parquet(url, storage_options={"request_timeout": 2})
        assert read.to_arrow().equals(table)
    assert unmet == []


def test_an_object_that_changes_size_while_it_is_read_is_an_error_not_other_bytes():
    store = storage.Store("memory")
    fs = store.filesystem().handler.fs
    path = f"/vane-{uuid.uuid4().hex[:8]}/f.bin"
    fs.pipe_file(path, bytes(range(256)) * 40)
    read = storage.FsspecObject(store, fs, path, 10_240)
    assert read.read_at(100, 5_000) == (bytes(range(256)) * 40)[5_000:5_100]
    fs.pipe_file(path, b"short")
    with pytest.raises(StorageError, match="changed since it was listed") as raised:
        read.read_at(100, 0)
    assert f"memory://{path}" in str(raised.value)
    fs.pipe_file(path, b"x" * 403)  # (a count in the message is no HTTP status)
    with pytest.raises(StorageError, match="answered 403") as raised:
        read.read_at(1_000, 0)
    assert type(raised.value) is StorageError


# ---- faults --------------------------------------------------------------------------------------


class _Faults:
    """What the proxy does to the next requests: answer 503 SlowDown, reset the connection,
    stall past the client's timeout, or answer 403 InvalidAccessKeyId; then forward as
    usual."""

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.requests = 0
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            self.requests += 1
            return self.plan.pop(0) if self.plan else "forward"


@pytest.fixture(scope="module")
def proxy(endpoint) -> Iterator[tuple[str, _Faults]]:
    faults = _Faults()
    target = endpoint.removeprefix("http://")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            action = faults.next()
            if action == "stall":  # longer than the client waits: it times out and retries
                time.sleep(2.5)
                self.close_connection = True
                return
            if action == "reset":
                self.connection.shutdown(2)
                self.close_connection = True
                return
            if action in ("503", "403"):
                code, text = (
                    ("SlowDown", "Please reduce your request rate.")
                    if action == "503"
                    else ("InvalidAccessKeyId", "The AWS Access Key Id does not exist.")
                )
                reply = f"<Error><Code>{code}</Code><Message>{text}</Message></Error>".encode()
                self.send_response(int(action))
                self.send_header("Content-Length", str(len(reply)))
                self.send_header("Content-Type", "application/xml")
                self.end_headers()
                self.wfile.write(reply if self.command != "HEAD" else b"")
                return
            upstream = http.client.HTTPConnection(target, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            headers["Host"] = target
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            upstream.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", faults
    finally:
        server.shutdown()
        server.server_close()


def test_throttling_and_resets_are_retried(bucket, proxy):
    url, faults = proxy
    options = {"endpoint_url": url}
    vane.range(10).write_parquet(f"s3://{bucket}/f/")  # straight to the server
    faults.plan = ["503", "reset", "503"]
    assert vane.read_parquet(f"s3://{bucket}/f/", storage_options=options).count() == 10
    assert not faults.plan  # every fault was met, and retried past


def test_a_request_that_stalls_past_its_timeout_is_retried(bucket, proxy):
    url, faults = proxy
    vane.range(10).write_parquet(f"s3://{bucket}/s/")
    options = {"endpoint_url": url, "request_timeout": 1}
    faults.plan = ["stall"]
    assert vane.read_parquet(f"s3://{bucket}/s/", storage_options=options).count() == 10
    assert not faults.plan


def test_a_refused_credential_is_a_clear_error_without_the_secret(bucket, proxy):
    url, faults = proxy
    vane.range(10).write_parquet(f"s3://{bucket}/f/")
    options = {"endpoint_url": url, "key": "AKIAWRONG", "secret": "very-secret-value"}
    faults.plan = ["403"] * 20
    with pytest.raises(StorageAccessError) as caught:
        vane.read_parquet(f"s3://{bucket}/f/", storage_options=options).count()
    faults.plan = []
    text = str(caught.value)
    assert f"s3://{bucket}/f/" in text and "credentials" in text
    assert "very-secret-value" not in text and "testing-secret-value" not in text
    assert caught.value.__cause__ is None  # no botocore or pyarrow traceback below it


def test_a_store_that_fails_during_a_scan_is_a_clear_error(bucket, proxy):
    url, faults = proxy
    vane.range(10).write_parquet(f"s3://{bucket}/g/")
    options = {"endpoint_url": url, "key": "AKIAOTHER", "secret": "another-secret-value"}
    rel = vane.read_parquet(f"s3://{bucket}/g/", storage_options=options)
    faults.plan = ["403"] * 40
    with pytest.raises(vane.errors.VaneError) as caught:
        rel.count()
    faults.plan = []
    text = str(caught.value)
    assert "Traceback" not in text and "another-secret-value" not in text
    assert "403" in text or "denied" in text.lower() or "refused" in text


def test_missing_bucket_object_and_unreachable_endpoint_are_clear(bucket):
    with pytest.raises(StorageNotFoundError, match=r"the bucket 'no-such-bucket' does not exist"):
        vane.read_parquet("s3://no-such-bucket/x/")
    with pytest.raises(SourceNotFoundError, match="matches no parquet object"):
        vane.read_parquet(f"s3://{bucket}/nothing-here/")
    options = {"endpoint_url": "http://127.0.0.1:9", "max_attempts": 2, "connect_timeout": 1}
    with pytest.raises(StorageError, match="could not be reached") as caught:
        vane.read_parquet(f"s3://{bucket}/x/", storage_options=options)
    assert "Traceback" not in str(caught.value)


# ---- the CLI -------------------------------------------------------------------------------------


def test_the_cli_reads_and_writes_urls(bucket):
    vane.range(6).select("id", "'q' || id AS text").write_parquet(f"s3://{bucket}/in/")
    done = subprocess.run(
        [sys.executable, "-m", "vane.cli", "sql", "SELECT 1 AS x", "-o", f"s3://{bucket}/o/"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert vane.read_parquet(f"s3://{bucket}/o/").to_pylist() == [{"x": 1}]
    shown = subprocess.run(
        [sys.executable, "-m", "vane.cli", "show", f"s3://{bucket}/in/"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "q5" in shown.stdout


def test_a_resumable_write_to_s3_keeps_its_answers_in_the_local_cache(
    bucket, tmp_path, monkeypatch
):
    monkeypatch.setenv("VANE_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[int] = []
    broken = [True]

    def model(batch):
        calls.append(batch["id"][0].as_py())
        if broken[0] and batch["id"][0].as_py() == 60:
            raise RuntimeError("preempted")
        return batch

    job = vane.range(100).map_batches(model, schema={"id": "BIGINT"}, batch_size=20)
    url = f"s3://{bucket}/resumed/"
    with pytest.raises(RuntimeError, match="preempted"):
        job.write_parquet(url, resume=True)
    assert list((tmp_path / "cache" / "resume").iterdir())  # the answers so far, kept here
    broken[0] = False
    calls.clear()
    result = job.write_parquet(url, resume=True)
    assert calls == [60, 80] and result.rows == 100  # only what no run had answered
    assert _ids(vane.read_parquet(url)) == list(range(100))
    assert not list((tmp_path / "cache" / "resume").iterdir())  # committed: gone


def test_a_resumable_write_knows_an_object_by_its_etag_and_never_by_a_remote_filename(bucket):
    """Over objects, a batch is known by its place only while the object is the same one (its
    ETag recorded), and never where its rows hold DuckDB's name for the object's store, which
    another process may register under another name."""
    from vane.execution.resume import input_identity

    url = f"s3://{bucket}/identity.parquet"
    vane.range(10).write_parquet(url)
    first = input_identity(vane.read_parquet(url).plan)
    assert first is not None
    assert input_identity(vane.read_parquet(url, filename=True).plan) is None
    another = vane.range(10).with_column("id", "id + 100")  # another object, of one size
    another.write_parquet(url, mode="overwrite")
    assert input_identity(vane.read_parquet(url).plan) not in (first, None)


def test_a_filesystems_own_error_is_a_vane_error_without_its_secret_or_traceback():
    """An fsspec filesystem's SDK raises errors of its own (gcsfs's HttpError, azure's...),
    whose text may hold a token: a read that fails so is a vane error, scrubbed."""
    import io

    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class SdkError(Exception):  # (neither an OSError nor of a library vane names)
        pass

    class Failing(MemoryFileSystem):
        protocol = "vane-failing"
        store: dict = {}  # noqa: RUF012 -- (fsspec's memory filesystems keep theirs so)
        pseudo_dirs = [""]  # noqa: RUF012

        @classmethod
        def _strip_protocol(cls, path: str) -> str:
            return MemoryFileSystem._strip_protocol(path.removeprefix("vane-failing://"))

        def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw):
            raise SdkError("the SDK failed: token=SECRET-TOKEN-123")

    fsspec.register_implementation("vane-failing", Failing, clobber=True)
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(10))}), buffer)
    Failing().pipe_file("/d/f.parquet", buffer.getvalue())
    options = {"token": "SECRET-TOKEN-123"}
    with pytest.raises(vane.errors.VaneError) as raised:
        vane.read_parquet("vane-failing:///d/f.parquet", storage_options=options).to_arrow()
    text = str(raised.value)
    assert "the SDK failed" in text and "vane-failing:///d/f.parquet" in text
    assert "SECRET-TOKEN-123" not in text and "Traceback" not in text
