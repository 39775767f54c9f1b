"""The storage layer without a server: URLs to stores, options spelled as users spell them,
errors that name the URL and hold no credential, and values that survive a round trip through
an object store's code path (fsspec's in-memory filesystem, the generic path every protocol
but S3 takes)."""

from __future__ import annotations

import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vane
from tests.integration.test_value_fidelity import assert_same_table
from tests.strategies import tables
from vane.errors import (
    ConfigurationError,
    StorageAccessError,
    StorageError,
    StorageNotFoundError,
)
from vane.io import storage, storage_errors


def test_s3_options_take_the_names_pandas_fsspec_and_aws_use():
    fsspec_style = storage.locate(
        "s3://b/k",
        {"key": "A", "secret": "S", "client_kwargs": {"endpoint_url": "http://h:9"}},
    )
    aws_style = storage.locate(
        "s3://b/k",
        {"aws_access_key_id": "A", "aws_secret_access_key": "S", "endpoint_url": "http://h:9"},
    )
    assert fsspec_style.store == aws_style.store
    assert fsspec_style.path == "b/k" and fsspec_style.url == "s3://b/k"
    with pytest.raises(ConfigurationError, match=r"storage_options has \['sekret'\]"):
        storage.locate("s3://b/k", {"sekret": "x"}, "read_parquet")


def test_configured_options_apply_by_protocol_and_calls_go_on_top():
    vane.configure(storage_options={"s3": {"region": "eu-west-1"}, "anon": True})
    try:
        options = dict(storage.locate("s3://b/k", {"region": "us-west-2"}).store.options)
        assert options == {"region": "us-west-2", "anonymous": True}
        assert dict(storage.locate("memory://x").store.options) == {"anon": True}
    finally:
        vane.configure(storage_options={})


def test_errors_name_the_url_and_never_a_credential():
    store = storage.locate("s3://b/k", {"key": "AKIAEXAMPLE", "secret": "s3cr3t-value"}).store
    refused = storage_errors.translate(
        OSError("AWS Error ACCESS_DENIED for key s3cr3t-value"), "s3://b/k", "cannot read", store
    )
    assert isinstance(refused, StorageAccessError)
    assert "s3://b/k" in str(refused) and "s3cr3t-value" not in str(refused)
    missing = storage_errors.translate(OSError("NoSuchBucket"), "s3://b/k", "cannot read", store)
    assert isinstance(missing, StorageNotFoundError) and "'b' does not exist" in str(missing)


_BUCKETS = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]", fullmatch=True)
_KEYS = st.from_regex(r"([A-Za-z0-9_.-]{1,12}/){0,3}[A-Za-z0-9_.-]{0,12}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(bucket=_BUCKETS, key=_KEYS)
def test_what_went_wrong_never_depends_on_the_bucket_or_key_name(bucket, key):
    """A name holding "403", "404", "not found" or "Forbidden" does not decide the error: the
    store's code and the exception's type do (a CI run's random bucket b-233c4039d4 made an
    unreachable endpoint a refused request)."""
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    where = f"s3://{bucket}/{key}"
    url = f"http://127.0.0.1:9/{bucket}?list-type=2&prefix={key}"
    store = storage.locate(where, {"endpoint_url": "http://127.0.0.1:9"}).store

    def kind(exc: BaseException) -> type:
        return type(storage_errors.translate(exc, where, "cannot list", store))

    def client(code: str, status: int) -> ClientError:
        reply = {"Error": {"Code": code, "Message": f"{code} for {key}"}}
        reply["ResponseMetadata"] = {"HTTPStatusCode": status}
        return ClientError(reply, "ListObjectsV2")

    unreachable = [
        EndpointConnectionError(endpoint_url=url),
        ReadTimeoutError(endpoint_url=url),
        OSError(
            f"When listing objects under key '{key}' in bucket '{bucket}': AWS Error "
            "NETWORK_CONNECTION during ListObjectsV2 operation: curlCode: 7, Couldn't connect"
        ),
    ]
    for exc in unreachable:
        error = storage_errors.translate(exc, where, "cannot list", store)
        assert kind(exc) is StorageError and "could not be reached" in str(error), error
    assert kind(client("AccessDenied", 403)) is StorageAccessError
    assert kind(client("NoSuchKey", 404)) is StorageNotFoundError
    missing_bucket = storage_errors.translate(client("NoSuchBucket", 404), where, "x", store)
    assert isinstance(missing_bucket, StorageNotFoundError)
    assert f"the bucket {bucket!r} does not exist" in str(missing_bucket)


def test_writes_and_reads_refuse_storage_options_for_local_paths(tmp_path):
    with pytest.raises(ConfigurationError, match="apply to remote paths"):
        vane.range(1).write_parquet(str(tmp_path / "o"), storage_options={"key": "k"})
    with pytest.raises(ConfigurationError, match="reads but cannot write"):
        vane.range(1).write_parquet("https://example.invalid/out/")
    with pytest.raises(ConfigurationError, match="local paths or URLs of one protocol"):
        vane.read_parquet([str(tmp_path), "memory://x/"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables())
def test_every_value_round_trips_through_an_object_store(table):
    url = f"memory://values-{uuid.uuid4().hex[:8]}/out/"
    source = vane.from_arrow(table)
    source.write_parquet(url)
    assert_same_table(source.to_arrow(), vane.read_parquet(url).to_arrow())


def test_a_callback_traceback_in_a_duckdb_error_becomes_its_last_line():
    from vane._sql import duckdb_message

    raised = (
        "IO Error: cannot open: Traceback (most recent call last):\n"
        '  File "pyarrow/_fs.pyx", line 58, in open_input_file\n'
        "    check_status()\n"
        "OSError: AWS Error ACCESS_DENIED during HeadObject operation"
    )
    assert duckdb_message(Exception(raised)) == (
        "IO Error: cannot open: OSError: AWS Error ACCESS_DENIED during HeadObject operation"
    )


class _Object:
    """An object's bytes as a store serves them, noting each range asked (``fetched``); with
    ``concurrent``, its reads may overlap (as an S3 object's do), so a reader reads ahead."""

    def __init__(self, data: bytes, *, concurrent: bool = True, fails: int | None = None) -> None:
        import threading

        self.data = data
        self.concurrent = concurrent
        self.fails = fails  # the offset whose read fails
        self.fetched: list[tuple[int, int]] = []
        self.asked = threading.Condition()

    def read_at(self, length: int, offset: int) -> bytes:
        with self.asked:
            self.fetched.append((offset, length))
            self.asked.notify_all()
        if offset == self.fails:
            raise StorageError(f"cannot read at {offset}")
        return self.data[offset : offset + length]

    def wait_for(self, offset: int) -> None:
        with self.asked:
            assert self.asked.wait_for(lambda: any(o == offset for o, _ in self.fetched), 120)

    def close(self) -> None:
        pass


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 3 * 2**16),
    reads=st.lists(st.tuples(st.integers(0, 3 * 2**16), st.integers(-1, 2**17)), max_size=8),
    concurrent=st.booleans(),
)
def test_a_ranged_file_reads_exactly_the_bytes_asked(size, reads, concurrent, monkeypatch_block):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    ranged = storage.RangedFile(_Object(data, concurrent=concurrent), len(data))
    for offset, length in reads:
        ranged.seek(offset)
        got = ranged.read(length)
        want = data[offset:] if length < 0 else data[offset : offset + length]
        assert got == want
        assert ranged.tell() == min(offset, len(data)) + len(want) or offset > len(data)
    ranged.close()


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 3 * 2**16),
    reads=st.lists(st.tuples(st.integers(0, 3 * 2**16), st.integers(-1, 2**17)), max_size=6),
)
def test_readers_of_one_object_share_its_last_block_and_read_its_bytes(
    size, reads, monkeypatch_block
):
    """Two readers of one object (one identity: store, path, size, time, ETag) read exactly
    its bytes; the second fetches nothing to read in the last block the first fetched."""
    import uuid

    import pyarrow as pa

    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    fetched: list[tuple[int, int]] = []

    class Counted:  # the object's bytes, noting each range asked of the store
        def read_at(self, length: int, offset: int) -> bytes:
            fetched.append((offset, length))
            return pa.BufferReader(data).read_at(length, offset)

        def close(self) -> None:
            pass

    identity = ("store", uuid.uuid4().hex, size, 0, "etag")
    last = (size - 1) // storage.RANGE_BLOCK * storage.RANGE_BLOCK
    first = 0
    for asked in ([(last, 1), *reads], [(last, 1), (size - 1, 1)]):
        first = len(fetched)
        ranged = storage.RangedFile(Counted(), size, identity)
        for offset, length in asked:
            ranged.seek(offset)
            want = data[offset:] if length < 0 else data[offset : offset + length]
            assert ranged.read(length) == want
        ranged.close()
    assert fetched[first:] == []


def test_a_read_that_goes_on_into_the_next_block_has_the_one_after_fetched_meanwhile(
    monkeypatch_block,
):
    """Reading on from block 0 into block 1 fetches block 2 before it is asked for (on a
    thread), and asking for it then sends nothing; a reader that jumps around fetches only
    what it asks; a source whose reads keep a position is never read ahead."""
    block = storage.RANGE_BLOCK
    data = bytes(range(256)) * (8 * block // 256)
    source = _Object(data)
    ranged = storage.RangedFile(source, len(data))
    ranged.seek(block - 10)
    assert ranged.read(20) == data[block - 10 : block + 10]  # blocks 0 and 1
    source.wait_for(2 * block)
    fetched = len(source.fetched)
    ranged.seek(2 * block + 5)
    assert ranged.read(block) == data[2 * block + 5 : 3 * block + 5]  # block 2, into 3
    assert (2 * block, block) not in source.fetched[fetched:]  # taken from the read-ahead
    ranged.close()

    jumps = _Object(data)
    ranged = storage.RangedFile(jumps, len(data))
    for number in (5, 0, 3, 7):
        ranged.seek(number * block)
        assert ranged.read(10) == data[number * block : number * block + 10]
    assert sorted(jumps.fetched) == [(n * block, block) for n in (0, 3, 5, 7)]

    positioned = _Object(data, concurrent=False)
    ranged = storage.RangedFile(positioned, len(data))
    assert ranged.read(3 * block) and ranged.read(10) == data[3 * block : 3 * block + 10]
    assert len(positioned.fetched) == 2  # the read as large as a block, then block 3 alone


def test_a_block_is_read_ahead_once_per_coming_into_the_one_before(monkeypatch_block, monkeypatch):
    """A reader reads the next block ahead when it comes into a block, not each time it
    reads there again: a block read ahead, dropped unused, is not fetched again by rereads of
    the block before it (each would have been a GET of a block nobody asked for)."""
    monkeypatch.setattr(storage, "READS_AHEAD_KEPT", 1)  # so that block 2 is soon let go
    block = storage.RANGE_BLOCK
    data = bytes(range(256)) * (10 * block // 256)
    source = _Object(data)
    ranged = storage.RangedFile(source, len(data))

    def read_in(number: int) -> None:
        ranged.seek(number * block + 7)
        assert ranged.read(5) == data[number * block + 7 : number * block + 12]

    read_in(0)
    read_in(1)  # on into block 1: block 2 read ahead
    source.wait_for(2 * block)
    for number in (5, 6):  # elsewhere: block 7 read ahead, and block 2, unused, let go
        read_in(number)
    for _ in range(3):
        read_in(1)
    ranged.close()
    assert [offset for offset, _ in source.fetched].count(2 * block) == 1


def test_a_file_read_straight_through_holds_only_its_kept_blocks_and_reads_ahead(
    monkeypatch_block,
):
    """Blocks that come from a read ahead are counted with the rest: reading an object of
    many blocks front to back, a file never holds more than RANGE_BLOCKS_KEPT blocks and
    READS_AHEAD_KEPT reads ahead (it held every block it had read)."""
    block = storage.RANGE_BLOCK
    data = bytes(range(256)) * (40 * block // 256)
    ranged = storage.RangedFile(_Object(data), len(data))
    for offset in range(0, len(data), block // 4):
        ranged.seek(offset)
        assert ranged.read(block // 4) == data[offset : offset + block // 4]
        assert len(ranged._blocks) <= storage.RANGE_BLOCKS_KEPT + storage.READS_AHEAD_KEPT
    ranged.close()


def test_threads_reading_one_file_at_once_get_its_bytes(monkeypatch_block):
    """DuckDB may read one file object from several threads: each gets its blocks' bytes,
    whatever the others' reads ahead and evictions (a read ahead another thread dropped
    while one waited on it failed that wait)."""
    import random
    import threading

    block = storage.RANGE_BLOCK
    data = bytes(range(256)) * (24 * block // 256)
    ranged = storage.RangedFile(_Object(data), len(data))
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        picks = random.Random(seed)
        try:
            for _ in range(300):
                number = picks.randrange(24)
                if picks.random() < 0.5:  # runs of blocks in order, as a column chunk is read
                    number = min(number, 20)
                    for n in range(number, number + 4):
                        assert ranged._block(n) == data[n * block : (n + 1) * block]
                else:
                    assert ranged._block(number) == data[number * block : (number + 1) * block]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ranged.close()
    assert errors == []


def test_a_read_ahead_that_failed_is_asked_again_when_its_block_is_read(monkeypatch_block):
    """A read ahead that failed is not the block's answer for good: reading the block asks
    the store again (a store that failed once answers now)."""
    block = storage.RANGE_BLOCK
    data = bytes(range(256)) * (4 * block // 256)

    class FailsOnce(_Object):
        def read_at(self, length: int, offset: int) -> bytes:
            answer = super().read_at(length, offset)
            if offset == 2 * block and self.fetched.count((offset, length)) == 1:
                raise StorageError("a reset, the first time")
            return answer

    source = FailsOnce(data)
    ranged = storage.RangedFile(source, len(data))
    ranged.seek(block - 5)
    assert ranged.read(10) == data[block - 5 : block + 5]  # block 2 read ahead: it fails
    source.wait_for(2 * block)
    ranged.seek(2 * block)
    assert ranged.read(10) == data[2 * block : 2 * block + 10]
    ranged.close()


def test_a_block_read_ahead_that_failed_raises_only_when_it_is_asked_for(monkeypatch_block):
    block = storage.RANGE_BLOCK
    data = bytes(range(256)) * (4 * block // 256)
    source = _Object(data, fails=2 * block)
    ranged = storage.RangedFile(source, len(data))
    ranged.seek(block - 5)
    assert ranged.read(10) == data[block - 5 : block + 5]  # on into block 1: block 2 is asked
    source.wait_for(2 * block)
    ranged.seek(0)
    assert ranged.read(10) == data[:10]  # its failure is not this read's
    ranged.seek(2 * block)
    with pytest.raises(StorageError, match=f"cannot read at {2 * block}"):
        ranged.read(10)
    ranged.close()


@pytest.fixture(scope="module")
def monkeypatch_block():
    # Small blocks, so that reads span several and some go around the cache.
    saved = storage.RANGE_BLOCK
    storage.RANGE_BLOCK = 2**15
    yield
    storage.RANGE_BLOCK = saved


def test_the_file_stores_an_actor_is_sent_never_show_a_value():
    from vane.io import file_stores

    secret = "shown-nowhere-5f2a"
    stores = file_stores.FileStores(
        buckets=(("s3://b", (("secret_key", secret),)),), configured=(("secret_key", secret),)
    )
    assert secret not in repr(stores) and "s3://b" in repr(stores)


_FLAGS = {"1": True, "true": True, "yes": True, "on": True}
_FLAGS |= {"0": False, "false": False, "no": False, "off": False}


@settings(max_examples=80, deadline=None)
@given(
    word=st.sampled_from(sorted(_FLAGS)),
    casing=st.lists(st.booleans(), min_size=5, max_size=5),
    pad=st.sampled_from(["", " ", "\t"]),
    seconds=st.floats(0.001, 600, allow_nan=False),
    unit=st.sampled_from(["", "s", "ms", "m"]),
)
def test_s3_flags_and_times_mean_what_they_say_in_any_spelling(word, casing, pad, seconds, unit):
    """anon="false" is not anonymous (any text used to be: a request unsigned, refused by a
    private bucket); timeouts and attempts written as text are numbers; what is neither is a
    clear error naming the option."""
    import botocore

    from vane.io.object_puts import s3_client

    spelled = (
        pad + "".join(c.upper() if up else c for c, up in zip(word, casing, strict=False)) + pad
    )
    text = f"{seconds!r}{unit}"
    expected = seconds * {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0}[unit]
    where = storage.locate(
        "s3://b/k",
        {"anon": spelled, "connect_timeout": text, "max_attempts": "3"},
        "read_parquet",
    )
    options = dict(where.store.options)
    assert options["anonymous"] is _FLAGS[word]
    assert options["connect_timeout"] == pytest.approx(expected)
    assert options["max_attempts"] == 3
    unsigned = s3_client(where.store).meta.config.signature_version
    assert (unsigned is botocore.UNSIGNED) is _FLAGS[word]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("anon", "maybe"),
        ("anon", 2),
        ("connect_timeout", "soon"),
        ("request_timeout", 0),
        ("request_timeout", "nan"),
        ("connect_timeout", float("inf")),
        ("max_attempts", "three"),
        ("max_attempts", 0),
        ("max_attempts", True),
        ("max_attempts", 2.5),
    ],
)
def test_an_s3_option_that_means_nothing_is_a_clear_error(name, value):
    """(A whole number of attempts may come as 3, 3.0, "3", "3.0" or numpy's int.)"""
    import numpy as np

    for attempts in (3, 3.0, "3", " 3.0 ", np.int64(3)):
        where = storage.locate("s3://b/k", {"max_attempts": attempts}, "read_parquet")
        assert dict(where.store.options)["max_attempts"] == 3
    with pytest.raises(ConfigurationError, match=f"read_parquet.*{name}={value!r}"):
        storage.locate("s3://b/k", {name: value}, "read_parquet")


def test_an_fsspec_filesystem_whose_reads_share_a_handle_is_read_one_read_at_a_time(tmp_path):
    """tar's reads seek and read one archive file: two threads at once read each other's
    bytes. Such a filesystem's reads take turns (and are not read ahead); an asynchronous one
    (each read a request of its own) and memory's run at once."""
    import random
    import sys
    import tarfile

    data = random.Random(7).randbytes(300_000)
    (tmp_path / "f.bin").write_bytes(data)
    with tarfile.open(tmp_path / "a.tar", "w") as archive:
        archive.add(tmp_path / "f.bin", arcname="f.bin")
    store = storage.Store("tar", storage.freeze({"fo": str(tmp_path / "a.tar")}))
    source = storage.FsspecObject(store, store.filesystem().handler.fs, "f.bin", len(data))
    assert source.concurrent is False
    memory = storage.Store("memory")
    assert storage.FsspecObject(memory, memory.filesystem().handler.fs, "/x", 1).concurrent
    http = storage.Store("http")
    assert storage.FsspecObject(http, http.filesystem().handler.fs, "http://h/x", 1).concurrent

    wrong: list[tuple[int, int]] = []

    def reads(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):
            offset, size = rng.randrange(0, len(data) - 70_000), rng.randrange(1, 65_536)
            if source.read_at(size, offset) != data[offset : offset + size]:
                wrong.append((offset, size))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch between a seek and its read)
    try:
        threads = [threading.Thread(target=reads, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


def test_a_server_that_ignores_ranges_is_read_from_one_answer_or_refused_when_large(monkeypatch):
    """An fsspec store whose reads answer the whole object (an HTTP server that ignores
    ranges): a small object is kept from its first answer; a large one is a clear error."""
    from fsspec.implementations.memory import MemoryFileSystem

    class Whole(MemoryFileSystem):  # answers every ranged read with the whole object
        protocol = "vane-test-whole"

        def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw):
            return super().cat_file(path)

    store = storage.Store("memory")
    fs = Whole(skip_instance_cache=True)
    fs.pipe_file("/small", bytes(range(256)) * 100)
    small = storage.FsspecObject(store, fs, "/small", 25_600)
    assert small.read_at(10, 300) == (bytes(range(256)) * 100)[300:310]
    fs.rm("/small")  # later reads come from the answer kept
    assert small.read_at(5, 25_595) == (bytes(range(256)) * 100)[25_595:]
    monkeypatch.setattr(storage, "WHOLE_KEPT", 10_000)
    fs.pipe_file("/large", b"\0" * 10_001)
    large = storage.FsspecObject(store, fs, "/large", 10_001)
    with pytest.raises(StorageError, match="ignores byte ranges"):
        large.read_at(10, 0)


@pytest.mark.parametrize(
    ("raised", "tried"),
    [
        (ConnectionResetError, storage.FSSPEC_ATTEMPTS),  # transient: tried again, each time
        (TimeoutError, storage.FSSPEC_ATTEMPTS),
        (FileNotFoundError, 1),  # a missing object stays missing
        (PermissionError, 1),
        (type("ClientConnectorCertificateError", (ConnectionError,), {}), 1),  # TLS: lasting
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_an_fsspec_read_is_tried_again_only_for_failures_that_pass(raised, tried, monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    calls: list[int] = []

    class Failing(MemoryFileSystem):
        def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw):
            calls.append(1)
            raise raised("the store failed")

    monkeypatch.setattr(storage, "_pause_before", lambda attempt: None)  # (no waiting here)
    store = storage.Store("memory")
    source = storage.FsspecObject(store, Failing(skip_instance_cache=True), "/f", 100)
    with pytest.raises(StorageError, match="memory:///f"):
        source.read_at(10, 0)
    assert len(calls) == tried


def test_http_reads_wait_for_each_piece_of_an_answer_not_for_the_whole_of_it():
    aiohttp = pytest.importorskip("aiohttp")
    default = storage._http_client({})["client_kwargs"]["timeout"]
    assert (default.total, default.sock_connect, default.sock_read) == (None, 10.0, 60.0)
    options = dict(
        storage.options_for("https", {"request_timeout": "2s", "max_attempts": "3"}, "t")
    )
    assert (options["request_timeout"], options["max_attempts"]) == (2.0, 3)
    assert storage.Store("https", storage.freeze(options)).attempts == 3
    built = storage._http_client({**options, "client_kwargs": {"trust_env": True}})
    assert "request_timeout" not in built and "max_attempts" not in built  # (not aiohttp's)
    assert built["client_kwargs"]["timeout"].sock_read == 2.0
    assert built["client_kwargs"]["trust_env"] is True
    theirs = aiohttp.ClientTimeout(total=5)
    assert storage._http_client({"client_kwargs": {"timeout": theirs}})["client_kwargs"] == {
        "timeout": theirs
    }
    with pytest.raises(ConfigurationError, match="request_timeout='soon' is not a time"):
        storage.options_for("http", {"request_timeout": "soon"}, "read_parquet")


@pytest.mark.parametrize(
    ("path", "above"),
    [
        ("http://h:8/a/b", ["http://h:8/a/b", "http://h:8/a", "http://h:8"]),  # not "http:"
        ("https://h/", ["https://h"]),
        ("bucket/a/b", ["bucket/a/b", "bucket/a", "bucket"]),
        ("/tmp/x", ["/tmp/x", "/tmp"]),
    ],
)
def test_the_prefixes_that_may_be_write_roots_stop_at_a_urls_host(path, above):
    from vane.io.object_commit import _ancestors

    assert _ancestors(path) == above
