"""Where data lives: a URL (``s3://bucket/key``, ``memory:///x``, ``hf://datasets/...``) resolved
to a filesystem and a path on it, the credentials and retries of that filesystem, and the one
door through which its errors become vane's.

Every remote filesystem is a ``pyarrow.fs.FileSystem``: S3 is pyarrow's own (C++, ranged reads,
multipart uploads, the AWS SDK's credential chain and retries); any other protocol fsspec knows
(``gs``, ``az``/``abfs``, ``hf``, ``http(s)``, ``memory``...) is fsspec's implementation wrapped
in ``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``. Readers and writers then speak one API.

DuckDB reads remote files through the same filesystem: each ``Store`` is registered with the
process's DuckDB database as an fsspec filesystem (``register_filesystem``), so its readers keep
every option and check they have on local files (CSV dialects, JSON types, ``union_by_name``,
hive columns, row-group statistics and column projection: DuckDB asks for the byte ranges it
needs, in ``RANGE_BLOCK`` ranges). DuckDB's own ``httpfs`` is never used: it downloads an
extension at run time, which fails offline and in locked-down clusters. What a listing said of
each object (``seen``) answers DuckDB's questions about it, so it sends no HEAD request; on S3
the ranges are GET requests of their own, naming the object's ETag (``s3_objects``), and an
object's last block is shared by every reader of it for a while (``RangedFile``).

Measured on the local S3 test server (moto), a 104 MB Parquet object of 31 row groups, against
pyarrow's own reader of the same object (``pq.ParquetFile``, which coalesces its ranged reads):
first batch 0.62 s (pyarrow 0.2 s); one column of 2M rows 3.7 s (pyarrow 3.3 s: 0.87x); a
filter that row-group statistics prune 0.3 s; all rows streamed 5.7 s. On a 60 MB object,
DuckDB scanning a ``pyarrow.dataset`` of it instead was 0.46 s against 0.57 s for one column
and 0.84 s against 0.50 s for two: no clear winner, and this way keeps every reader option.

A ``Store`` is small, frozen and picklable (protocol + options), so a scan or a writer sent to
a Ray worker or a subprocess rebuilds its filesystem there, once per process.

``storage_options`` are spelled as pandas, Polars and fsspec spell them. For S3: ``key``,
``secret``, ``token``, ``endpoint_url``, ``region``, ``anon`` (also the AWS names:
``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``, ``aws_endpoint_url``,
``aws_region``, ``region_name``), ``client_kwargs={"endpoint_url": ..., "region_name": ...}``,
``max_attempts``, ``connect_timeout``, ``request_timeout``. Without them, the AWS chain applies
(environment, ``~/.aws`` and ``AWS_PROFILE``, instance roles), and ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL`` (the SDKs' variables for S3-compatible stores: MinIO, R2, a test server)
are honoured, which pyarrow's S3 filesystem would not do by itself. Other protocols take their
fsspec implementation's own options unchanged.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vane._retry import TRANSIENT_STATUS, backoff_seconds, lasting
from vane.errors import (
    ConfigurationError,
    MissingDependencyError,
    StorageError,
)
from vane.io.storage_errors import (
    S3_ATTEMPTS,
    S3_CONNECT_TIMEOUT,
    S3_REQUEST_TIMEOUT,
    Frozen,
    scrub,
    translate,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow.fs as pafs

_URI = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# The fsspec packages that implement protocols users ask for most, to name in an error.
_PACKAGES = {
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "hf": "huggingface_hub",
    "http": "aiohttp",
    "https": "aiohttp",
}
_S3_NAMES = {
    "key": "access_key",
    "aws_access_key_id": "access_key",
    "access_key": "access_key",
    "secret": "secret_key",
    "aws_secret_access_key": "secret_key",
    "secret_key": "secret_key",
    "token": "session_token",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "endpoint_url": "endpoint_url",
    "aws_endpoint_url": "endpoint_url",
    "endpoint": "endpoint_url",
    "endpoint_override": "endpoint_url",
    "region": "region",
    "region_name": "region",
    "aws_region": "region",
    "anon": "anonymous",
    "anonymous": "anonymous",
    "max_attempts": "max_attempts",
    "connect_timeout": "connect_timeout",
    "request_timeout": "request_timeout",
}


def protocol_of(path: str) -> str | None:
    """``"s3"`` for ``s3://b/k``; None for a local path (``file://`` included)."""
    match = _URI.match(path)
    if match is None or match.group(1).lower() == "file":
        return None
    return match.group(1).lower()


def is_remote(path: str) -> bool:
    return protocol_of(path) is not None


def freeze(options: Mapping[str, Any]) -> Frozen:
    return tuple(
        sorted((str(k), freeze(v) if isinstance(v, Mapping) else v) for k, v in options.items())
    )


def thaw(options: Frozen) -> dict[str, Any]:
    return {
        k: thaw(v) if isinstance(v, tuple) and all(isinstance(i, tuple) for i in v) and v else v
        for k, v in options
    }


@dataclass(frozen=True)
class Store:
    """One remote filesystem: a protocol and the options that reach it."""

    protocol: str
    options: Frozen = ()

    def filesystem(self) -> pafs.FileSystem:
        """This store's filesystem, built once per process (again if the environment
        variables it reads have changed since)."""
        key = (self, tuple(os.environ.get(name) for name in _ENVIRONMENT))
        with _lock:
            built = _filesystems.get(key)
            if built is None:
                built = _filesystems[key] = self._build()
            return built

    def _build(self) -> pafs.FileSystem:
        if self.protocol in ("s3", "s3a"):
            return _s3(thaw(self.options))
        try:
            import fsspec
            from pyarrow.fs import FSSpecHandler, PyFileSystem
        except ImportError as exc:  # pragma: no cover - fsspec is a dependency of vane's deps
            raise MissingDependencyError(
                "remote paths other than s3:// need the package 'fsspec'. Install it with: "
                "pip install fsspec"
            ) from exc
        options = thaw(self.options)
        try:
            if self.protocol in HTTP:
                options = _http_client(options)  # (imports aiohttp)
            fs = fsspec.filesystem(self.protocol, **options)
        except (ImportError, ValueError) as exc:
            package = _PACKAGES.get(self.protocol)
            if package is None and "Protocol not known" in str(exc):
                raise ConfigurationError(
                    f"{self.protocol}:// is not a protocol vane (through fsspec) knows; the "
                    "known ones are s3, gs, az, abfs, hf, http, https, memory and those of "
                    "installed fsspec packages"
                ) from exc
            raise MissingDependencyError(
                f"{self.protocol}:// paths need the package {package or 'that implements it'!r} "
                f"(an fsspec filesystem), which could not be loaded: {exc}. Install it with: "
                f"pip install {package or '<package>'}"
            ) from exc
        except TypeError as exc:
            raise self.refused(exc) from exc
        return PyFileSystem(FSSpecHandler(fs))

    def refused(self, exc: TypeError) -> ConfigurationError:
        """The error for options this store's fsspec filesystem (or, over HTTP, aiohttp's
        requests) would not take."""
        ours = ", or vane's connect_timeout, request_timeout and max_attempts"
        return ConfigurationError(
            f"storage_options for {self.protocol}:// were not accepted by its filesystem "
            f"({type(exc).__name__}: {self.scrub(str(exc))}); pass the options its fsspec "
            f"implementation documents{ours if self.protocol in HTTP else ''}"
        )

    @property
    def attempts(self) -> int:
        """Tries of one ranged read of an fsspec object in all (``max_attempts`` of http(s))."""
        return int(dict(self.options).get("max_attempts", FSSPEC_ATTEMPTS))

    def url(self, path: str) -> str:
        """The URL a user would write for ``path`` on this store (an http(s) filesystem's
        paths are whole URLs already)."""
        return path if _URI.match(path) else f"{self.protocol}://{path}"

    def duckdb_url(self, path: str, cursor: duckdb.DuckDBPyConnection) -> str:
        """``path`` as DuckDB can open it through this store, registered with ``cursor``'s
        database if it is not yet (once per process and store)."""
        return f"{_registered(self, cursor)}://{path}"

    def scrub(self, text: str) -> str:
        return scrub(text, self.options)


_lock = threading.Lock()
_filesystems: dict[tuple[Store, tuple[str | None, ...]], pafs.FileSystem] = {}
# What the S3 filesystem reads from the environment when it is built.
_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
)
_aliases: dict[Store, str] = {}
_registered_with: set[tuple[int, str]] = set()
_serial = itertools.count()


def _registered(store: Store, cursor: duckdb.DuckDBPyConnection) -> str:
    """The protocol name ``store`` is registered under with DuckDB: its own for the first store
    of a protocol (so DuckDB's ``filename`` column shows the user's URL), ``<protocol>v<n>`` for
    stores of the same protocol with other options."""
    from vane import _engine

    database = _engine.database_id()
    with _lock:
        alias = _aliases.get(store)
        if alias is None:
            taken = set(_aliases.values())
            alias = store.protocol if store.protocol not in taken else ""
            while not alias or alias in taken:
                alias = f"{store.protocol}v{next(_serial)}"
            _aliases[store] = alias
        if (database, alias) in _registered_with:
            return alias
        _registered_with.add((database, alias))
    cursor.register_filesystem(_duckdb_filesystem(store, alias))
    return alias


# How long DuckDB's view of an object's size and time is reused: DuckDB asks for them many
# times per file while it plans and opens a scan (259 HEAD requests for 16 files, measured),
# and a scan checks its files' stamps itself before it reads (plan/nodes.py, FileScan).
_INFO_SECONDS = 30.0
_ESCAPED = re.compile(r"\[([*?\[])\]")
# Each object's FileInfo as a listing or a request last saw it, with when (monotonic) and its
# ETag where the listing said it (S3): the listing that resolved a read and the one that
# checks its stamps before an action answer DuckDB's questions, so it sends no HEAD request
# of its own, and its reads name the ETag the check saw.
_seen: dict[tuple[Store, str], tuple[float, Any, str | None]] = {}
_SEEN_KEPT = 100_000


def seen(store: Store, infos: list[Any], etags: Mapping[str, str] | None = None) -> None:
    """Note what a listing of ``store`` just said of these objects (``pyarrow.fs.FileInfo``,
    and their ETags by path)."""
    import time

    now = time.monotonic()
    with _lock:
        for info in infos:
            _seen.pop((store, info.path), None)  # to the end: the oldest go first
            _seen[(store, info.path)] = (now, info, (etags or {}).get(info.path))
        if len(_seen) > _SEEN_KEPT:
            for key in list(itertools.islice(_seen, len(_seen) - _SEEN_KEPT)):
                del _seen[key]


def recall(store: Store, path: str) -> tuple[Any, str | None] | None:
    """What a listing or a request said of the object at ``path`` in the last
    ``_INFO_SECONDS`` (a ``pyarrow.fs.FileInfo``, and its ETag if known), or None."""
    import time

    cached = _seen.get((store, path))
    if cached is None or time.monotonic() - cached[0] >= _INFO_SECONDS:
        return None
    return cached[1], cached[2]


def complete(info: Any) -> bool:
    """Whether ``info`` says an object's size and time (an HTTP index page's listing does not)."""
    return info.size is not None and info.mtime_ns is not None


def object_stamp(store: Store, info: Any, etag: str | None = None) -> tuple[int, int, int, int]:
    """An object's identity (``readers.Stamp``) from its ``FileInfo``: its ETag (as a number;
    0 where the store says none), size and time, to the second (a listing and a HEAD request
    give the time at different precisions). Over HTTP its size only: a server's time and
    ETag may change with every answer (a dynamic page's ``Last-Modified`` is now; servers
    behind one name each have their own ETag), which would make every action find the file
    changed."""
    from vane.io.s3_objects import etag_number

    if store.protocol in HTTP:
        return (0, 0, info.size or 0, 0)
    tag = etag_number(etag) if etag else 0
    return (0, tag, info.size or 0, (info.mtime_ns or 0) // 10**9)


def _duckdb_filesystem(store: Store, alias: str) -> Any:
    """``store`` as the fsspec filesystem DuckDB calls, answering to ``alias://``, with each
    object's size and time looked up once per ``_INFO_SECONDS`` (or taken from a listing
    made as recently, ``seen``)."""
    import datetime
    import time

    from fsspec.implementations.arrow import ArrowFSWrapper
    from pyarrow.fs import FileType

    prefix = f"{alias}://"

    def strip(cls: type, path: str) -> str:
        return path[len(prefix) :] if path.startswith(prefix) else path

    def file_info(self: Any, path: str) -> Any:
        return lookup(self, strip(type(self), path))

    def lookup(self: Any, path: str) -> Any:
        """The object at ``path`` (on the store, no protocol), as recently seen."""
        return looked_up(self, path)[0]

    def looked_up(self: Any, path: str) -> tuple[Any, str | None]:
        """The object at ``path`` and its ETag, as recently seen. Asked again, it keeps the
        ETag its listing gave: reads name it, so an object replaced since fails its read."""
        now = time.monotonic()
        cached = _seen.get((store, path))
        if cached is not None and now - cached[0] < _INFO_SECONDS:
            return cached[1], cached[2]
        [found] = self.fs.get_file_info([path])
        etag = cached[2] if cached is not None else None
        with _lock:
            _seen[(store, path)] = (now, found, etag)
        return found, etag

    def info(self: Any, path: str, **kwargs: Any) -> Any:
        return self._make_entry(file_info(self, path))

    def glob(self: Any, path: str, **kwargs: Any) -> list[str]:
        # vane hands DuckDB explicit files, each glob character escaped as a class of its own
        # (readers.duckdb_path): the file itself, if it is there.
        exact = _ESCAPED.sub(r"\1", strip(type(self), path))
        found = lookup(self, exact)
        return [prefix + exact] if found.type == FileType.File else []

    def modified(self: Any, path: str) -> Any:
        # DuckDB asks every file's time; a store that keeps none (fsspec's memory) says 1970.
        found = file_info(self, path).mtime
        epoch = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
        return found if found is not None else epoch

    def open_file(
        self: Any, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any
    ) -> Any:
        if mode != "rb":
            return ArrowFSWrapper._open(self, path, mode, block_size, **kwargs)
        found, etag = looked_up(self, path)  # fsspec's open() took the protocol off already
        return open_object(store, found, etag)

    kind = type(
        f"VaneStore_{alias}",
        (ArrowFSWrapper,),
        {
            "protocol": alias,
            "root_marker": "",
            "_strip_protocol": classmethod(strip),
            "info": info,
            "glob": glob,
            "modified": modified,
            "_open": open_file,
            # the store's filesystem as it is now (rebuilt if the environment changed)
            "fs": property(lambda self: store.filesystem(), lambda self, value: None),
        },
    )
    # fsspec caches instances by their arguments: a new class per alias keeps them apart.
    return kind(store.filesystem(), skip_instance_cache=True)


# DuckDB reads a Parquet file a page at a time (vane turns its prefetching off, _engine.py):
# small reads, each a request to a store. Reads go through blocks of this size instead, the
# last few kept: measured on a 104 MB object of 31 row groups, the first batch came after
# 16 s without them (every page its own request) against 0.8 s for pyarrow's own reader.
RANGE_BLOCK = 4 * 2**20
# Blocks kept per open file, and reads ahead: DuckDB's threads may read one file object at
# once, each in two places or more (a row group's columns); at most 48 MB a file.
RANGE_BLOCKS_KEPT = 8
READS_AHEAD_KEPT = 4


def http_info(store: Store, path: str) -> tuple[pafs.FileInfo, str | None]:
    """What the URL ``path`` is, and its ETag if its server says one, in one request (fsspec's
    HEAD): its size, its time (``Last-Modified``) and its ETag, which make it known as a
    listing's objects are (``seen``, ``object_stamp``: DuckDB's opens ask nothing again and its
    readers share the object's last block). fsspec says "not found" for whatever failed (a
    404, but also a timeout, a refused connection, a 500, an option aiohttp does not take):
    only a 404 or 410 is "not found" here; anything else is raised, for the caller to say,
    rather than "matches no object: check the path". A failure that may pass (a timeout, a
    reset, a 503) is asked again, as reads are (``FsspecObject``)."""
    from pyarrow.fs import FileInfo, FileType

    fs = store.filesystem()
    attempts = store.attempts
    for attempt in range(attempts):
        try:
            answer = fsspec_of(fs).info(path)
            break
        except FileNotFoundError as exc:
            cause = exc.__cause__
            if cause is None or getattr(cause, "status", None) in (404, 410):
                return FileInfo(path, FileType.NotFound), None
            if isinstance(cause, TypeError):  # an option aiohttp's requests do not take
                raise store.refused(cause) from None
            if attempt == attempts - 1 or not _transient(cause):
                raise cause from None
            _pause_before(attempt + 1)
    if answer.get("size") is None:  # a server that says no length: asked the usual way
        return fs.get_file_info(path), None
    info = FileInfo(path, FileType.File, size=int(answer["size"]), mtime=_http_time(answer))
    return info, answer.get("ETag") or None


def _http_time(answer: Mapping[str, Any]) -> Any:
    """An HTTP answer's ``Last-Modified`` as a datetime (None if it says none, or nonsense)."""
    from email.utils import parsedate_to_datetime

    text = answer.get("Last-Modified")
    if not text:
        return None
    try:
        return parsedate_to_datetime(str(text))
    except (TypeError, ValueError):
        return None


def fsspec_of(fs: pafs.FileSystem) -> Any:
    """The fsspec filesystem inside ``fs`` (a ``PyFileSystem(FSSpecHandler(...))``: any
    protocol but S3), or None."""
    return getattr(getattr(fs, "handler", None), "fs", None)


def concurrent_requests(fs: Any) -> bool:
    """Whether calls to the fsspec filesystem ``fs`` may run on several threads at once: its
    asynchronous ones (http, gcs, az, s3fs: each call a request of its own) and memory, which
    keep no state between calls; others may share one handle (tar's file, ftp's connection)."""
    from fsspec.asyn import AsyncFileSystem

    return isinstance(fs, AsyncFileSystem) or getattr(fs, "protocol", None) in ("memory",)


def open_object(store: Store, info: Any, etag: str | None = None) -> RangedFile:
    """The object ``info`` (a ``pyarrow.fs.FileInfo``) describes, to read at any offset. On S3,
    with its size known, each read is one ranged GET request naming its ``etag`` (if known)
    and nothing else (``s3_objects.S3Object``): pyarrow's input file would first ask the size
    again, a HEAD request per open, and DuckDB opens a file several times per query."""
    # Its last block is shared by its readers only where an ETag names its content: a size
    # and a time to the second (an HTTP server's) would not tell a rewrite within the second.
    identity = (store, info.path, info.size, info.mtime_ns, etag) if etag else None
    if store.protocol == "s3" and info.size is not None:
        from vane.io.s3_objects import S3Object

        return RangedFile(S3Object(store, info.path, etag), info.size, identity)
    fs = store.filesystem()
    fsspec_fs = fsspec_of(fs)
    if info.size is not None and hasattr(fsspec_fs, "cat_file"):
        source = FsspecObject(store, fsspec_fs, info.path, info.size)
        return RangedFile(source, info.size, identity)
    return RangedFile(fs.open_input_file(info.path), info.size, identity)


class FsspecObject:
    """An object on an fsspec filesystem (gs, az, http, hf...), its size known from a
    listing, read by ranges: each read one ``cat_file`` of a byte range (a ranged GET on
    HTTP, GCS or Azure). An open asks the store nothing (pyarrow's handler asked, at each of
    DuckDB's opens, whether the path is a file, which over HTTP is a GET of the whole body
    dropped after its headers, and its size, a HEAD request).

    Reads of an asynchronous filesystem (http, gcs, az, s3fs: each ``cat_file`` a request of
    its own) or of memory keep no state, so they may run at once on several threads
    (``concurrent``: read one block ahead). Any other filesystem's reads may share one handle
    (tar's archive file, ftp's connection): they take turns, one at a time per filesystem.

    A read that fails for a moment (a reset or refused connection, a timeout, a body cut
    short, 408/429/5xx) is tried again, ``FSSPEC_ATTEMPTS`` times in all (http(s)'s
    ``max_attempts``) with a growing pause
    (fsspec's HTTP filesystem retries nothing; gcsfs and adlfs retry on their own as well);
    what still fails is a vane ``StorageError`` naming the URL. A server that ignores ranges
    answers the whole object: one of up to ``WHOLE_KEPT`` bytes is kept and read from, a
    larger one is refused (every block would download all of it)."""

    def __init__(self, store: Store, fs: Any, path: str, size: int) -> None:
        self._store = store
        self._fs = fs
        self._path = path
        self._size = size
        self._whole: bytes | None = None
        self.concurrent = concurrent_requests(fs)
        self._turns = contextlib.nullcontext() if self.concurrent else _turns_of(fs)

    def read_at(self, size: int, offset: int) -> bytes:
        if size <= 0:
            return b""
        whole = self._whole
        if whole is not None:
            return whole[offset : offset + size]
        where = self._store.url(self._path)
        attempts = self._store.attempts
        for attempt in range(attempts):
            try:
                with self._turns:
                    data = bytes(self._fs.cat_file(self._path, start=offset, end=offset + size))
            except Exception as exc:
                if attempt < attempts - 1 and _transient(exc):
                    _pause_before(attempt + 1)
                    continue
                # (whichever library raised it: its text scrubbed, its traceback left out)
                raise translate(exc, where, "cannot read", self._store) from None
            if len(data) == size:
                return data
            if len(data) == self._size:  # a server that ignores ranges: the whole object
                if self._size > WHOLE_KEPT:
                    raise StorageError(
                        f"cannot read {where}: its server ignores byte ranges and answers all "
                        f"{self._size:,} bytes to each read of a part. Copy the file somewhere "
                        "that answers ranges (an object store, a local path) and read it there"
                    )
                self._whole = data
                return data[offset : offset + size]
            raise StorageError(
                f"cannot read {where}: asked for {size} bytes at {offset} of its "
                f"{self._size}, the store answered {len(data)}. It changed since it was listed "
                "(build the relation again to read what is there now), or its server answers "
                "ranges wrongly"
            )
        raise AssertionError("unreachable")

    def close(self) -> None:
        pass  # (nothing held between reads)


# The largest object kept whole when its server ignores ranges (answering every read with all
# of it): a small file is read from one answer; a larger one would be downloaded per block.
WHOLE_KEPT = 64 * 2**20
_fs_turns: dict[int, tuple[Any, threading.Lock]] = {}


def _turns_of(fs: Any) -> threading.Lock:
    """The lock that the reads of ``fs`` (a filesystem whose reads may share one handle) take
    turns under."""
    with _lock:
        kept = _fs_turns.get(id(fs))
        if kept is None or kept[0] is not fs:
            kept = _fs_turns[id(fs)] = (fs, threading.Lock())
        return kept[1]


# Tries of one read of an fsspec object in all, as of an S3 request (the AWS SDK's standard).
FSSPEC_ATTEMPTS = S3_ATTEMPTS
# aiohttp's errors (fsspec's HTTP filesystem raises them as they are), known by name so that
# this module does not import aiohttp: a connection lost or refused, a body cut short; not a
# certificate or TLS failure, which asking again does not mend.
_TRANSIENT_NAMES = frozenset({"ClientConnectionError", "ClientPayloadError", "ServerTimeoutError"})


def _transient(exc: BaseException) -> bool:
    """Whether a failed read may well succeed if asked again."""
    if lasting(exc):
        return False
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, (ConnectionError, TimeoutError)):  # fsspec's FSTimeoutError is one
        return True
    if getattr(exc, "status", None) in TRANSIENT_STATUS:  # aiohttp's ClientResponseError
        return True
    return bool(names & _TRANSIENT_NAMES)


def _pause_before(attempt: int) -> None:
    """Wait before try ``attempt`` (1, 2...)."""
    import time

    time.sleep(backoff_seconds(attempt))


class _Tails:
    """The last block of each object recently read, by the object's identity (store, path,
    size, time, ETag), for ``_INFO_SECONDS``, at most ``TAILS_KEPT`` bytes in all (the oldest
    go first). An object replaced since has another ETag: its new tail is fetched."""

    def __init__(self) -> None:
        self._kept: OrderedDict[Hashable, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, identity: Hashable, fetch: Callable[[], bytes]) -> bytes:
        import time

        now = time.monotonic()
        with self._lock:
            kept = self._kept.get(identity)
            if kept is not None and now - kept[0] < _INFO_SECONDS:
                self._kept.move_to_end(identity)
                return kept[1]
        block = fetch()  # outside the lock: other objects' reads go on meanwhile
        with self._lock:
            old = self._kept.pop(identity, None)
            self._bytes += len(block) - (len(old[1]) if old else 0)
            self._kept[identity] = (now, block)
            while self._bytes > TAILS_KEPT and self._kept:
                _, (_, dropped) = self._kept.popitem(last=False)
                self._bytes -= len(dropped)
        return block


TAILS_KEPT = 64 * 2**20
_tails = _Tails()


class _Prefetch:
    """Threads that fetch blocks ahead of their readers (``RangedFile._read_ahead``): daemon
    threads, so that a request to a stalled store never holds the interpreter's exit; a
    forked child starts afresh (no threads, an empty queue, a new lock)."""

    THREADS = 4

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        import queue

        self._jobs: queue.SimpleQueue[tuple[Future[bytes], Callable[[], bytes]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, fetch: Callable[[], bytes]) -> Future[bytes]:
        future: Future[bytes] = Future()
        with self._lock:
            self._jobs.put((future, fetch))
            if self._threads < self.THREADS:
                self._threads += 1
                threading.Thread(
                    target=self._serve, args=(self._jobs,), name="vane-read-ahead", daemon=True
                ).start()
        return future

    @staticmethod
    def _serve(jobs: Any) -> None:
        while True:
            future, fetch = jobs.get()
            if not future.set_running_or_notify_cancel():
                continue  # its reader moved on, or closed
            try:
                future.set_result(fetch())
            except BaseException as exc:  # raised to the reader that asks for the block
                future.set_exception(exc)


_prefetch = _Prefetch()


class RangedFile(io.RawIOBase):
    """A remote object as DuckDB reads it: seekable, read in ``RANGE_BLOCK`` ranges (one
    request each), the ``RANGE_BLOCKS_KEPT`` most recent kept; a read as large as a block goes
    to the store as it is.

    ``identity`` (the object's store, path, size, time and ETag, as a listing gave them): its
    last block is kept for every reader of the object for ``_INFO_SECONDS`` (``_tails``). It holds a
    Parquet file's footer and a small file whole, which the footers' reading, DuckDB's binding
    and each scan would otherwise each fetch again: 3 to 5 requests per small file become 1.

    A read that goes on from one block into the next has the block after that fetched on a
    thread meanwhile (``_read_ahead``; one block ahead of each reader, at most
    ``READS_AHEAD_KEPT`` a file): DuckDB reads a Parquet column chunk page by page, so
    without it every block's request waited for DuckDB to come to its first page."""

    def __init__(self, source: Any, size: int | None, identity: Hashable | None = None) -> None:
        super().__init__()
        self._source = source
        self._size = int(size if size is not None else source.size())
        self._position = 0
        # a block, or its fetch on a thread (read ahead), by number
        self._blocks: OrderedDict[int, bytes | Future[bytes]] = OrderedDict()
        self._identity = identity
        # Read ahead only from a source whose reads may overlap (an S3 object's GETs); one
        # that keeps a position (an fsspec file) is read by one thread at a time.
        self._ahead = bool(getattr(source, "concurrent", False))
        self._lock = threading.Lock()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def _block(self, number: int) -> bytes:
        # DuckDB may read one file object from several of its threads at once: ``_blocks`` is
        # changed under ``_lock`` only, and no fetch or wait holds it.
        with self._lock:
            got = self._blocks.get(number)
            if got is not None and not isinstance(got, Future):  # in hand
                self._blocks.move_to_end(number)
                return got
        block: bytes | None = None
        if got is not None:  # being read ahead: wait for it
            try:
                block = got.result()
            except Exception:  # failed, or dropped unstarted: the store is asked again below
                block = None
        if block is None:
            block = self._fetch_block(number)
        # The reader comes into this block: the only moment it reads the next one ahead, so a
        # block read again and again asks nothing more.
        with self._lock:
            self._blocks[number] = block
            self._blocks.move_to_end(number)
            if self._ahead and number - 1 in self._blocks:
                self._read_ahead(number + 1)
            self._trim()
        return block

    def _trim(self) -> None:
        """Let go of the least recently used blocks past ``RANGE_BLOCKS_KEPT``, and of the
        oldest reads ahead past ``READS_AHEAD_KEPT`` (each counted apart: a read ahead that
        another reader of this file is about to come to is not dropped for a block in hand)."""
        in_hand = [n for n, got in self._blocks.items() if not isinstance(got, Future)]
        ahead = [(n, got) for n, got in self._blocks.items() if isinstance(got, Future)]
        for number in in_hand[: max(0, len(in_hand) - RANGE_BLOCKS_KEPT)]:
            del self._blocks[number]
        for number, fetching in ahead[: max(0, len(ahead) - READS_AHEAD_KEPT)]:
            del self._blocks[number]
            fetching.cancel()  # (if begun, it ends; a reader waiting on it asks itself)

    def _read_ahead(self, number: int) -> None:
        """Fetch block ``number`` on a thread of ``_prefetch`` (a read that went on from one
        block to the next will likely ask for it): the store's answer comes while DuckDB
        decodes the blocks in hand. A file holds at most ``READS_AHEAD_KEPT`` of them, the
        oldest let go first (``_trim``)."""
        if number * RANGE_BLOCK >= self._size or number in self._blocks:
            return
        self._blocks[number] = _prefetch.submit(lambda: self._fetch_block(number))

    def _fetch_block(self, number: int) -> bytes:
        start = number * RANGE_BLOCK
        last = start + RANGE_BLOCK >= self._size
        if last and self._identity is not None:
            return _tails.get(self._identity, lambda: self._fetch(start))
        return self._fetch(start)

    def _fetch(self, start: int) -> bytes:
        block: bytes = self._source.read_at(min(RANGE_BLOCK, self._size - start), start)
        return block

    def read(self, size: int | None = -1) -> bytes:
        start = self._position
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        if end - start >= RANGE_BLOCK:
            data = bytes(self._source.read_at(end - start, start))
        else:
            pieces = []
            for number in range(start // RANGE_BLOCK, (end - 1) // RANGE_BLOCK + 1):
                block = self._block(number)
                base = number * RANGE_BLOCK
                pieces.append(block[max(start - base, 0) : end - base])
            data = b"".join(pieces)
        self._position = start + len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            with self._lock:
                for got in self._blocks.values():
                    if isinstance(got, Future):
                        got.cancel()
                self._blocks.clear()
            self._source.close()
        super().close()


def _s3(options: dict[str, Any]) -> pafs.FileSystem:
    from pyarrow.fs import AwsStandardS3RetryStrategy, S3FileSystem

    endpoint = options.get("endpoint_url") or (
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    kwargs: dict[str, Any] = {
        "retry_strategy": AwsStandardS3RetryStrategy(
            max_attempts=int(options.get("max_attempts", S3_ATTEMPTS))
        ),
        "connect_timeout": float(options.get("connect_timeout", S3_CONNECT_TIMEOUT)),
        "request_timeout": float(options.get("request_timeout", S3_REQUEST_TIMEOUT)),
    }
    if endpoint:
        scheme, _, rest = str(endpoint).rpartition("://")
        kwargs["endpoint_override"] = rest or str(endpoint)
        if scheme:
            kwargs["scheme"] = scheme
    region = options.get("region") or os.environ.get("AWS_REGION")
    if region:
        kwargs["region"] = region
    elif endpoint and not os.environ.get("AWS_DEFAULT_REGION"):
        # An S3-compatible store has no AWS region to look up; pyarrow would ask AWS for one.
        kwargs["region"] = "us-east-1"
    if options.get("anonymous") is True:
        kwargs["anonymous"] = True
    for name in ("access_key", "secret_key", "session_token"):
        if options.get(name):
            kwargs[name] = options[name]
    return S3FileSystem(**kwargs)


HTTP = ("http", "https")
# vane's own options of http(s), spelled as S3's; the others are fsspec's HTTP filesystem's.
_HTTP_NAMES = frozenset({"max_attempts", "connect_timeout", "request_timeout"})


def _http_client(options: dict[str, Any]) -> dict[str, Any]:
    """fsspec's HTTP filesystem's options for vane's: its aiohttp session waits
    ``connect_timeout`` seconds for a connection and ``request_timeout`` for each piece of an
    answer (a stalled server fails the read, which is tried again, where aiohttp's default waits
    five minutes for a whole answer, however slowly it comes), unless ``client_kwargs`` gives
    a ``timeout`` of its own."""
    import aiohttp

    connect = float(options.pop("connect_timeout", S3_CONNECT_TIMEOUT))
    request = float(options.pop("request_timeout", S3_REQUEST_TIMEOUT))
    options.pop("max_attempts", None)  # (the reads' own: ``Store.attempts``)
    client = dict(options.get("client_kwargs") or {})
    client.setdefault(
        "timeout", aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=request)
    )
    return {**options, "client_kwargs": client}


def is_s3_option(name: str) -> bool:
    """Whether ``name`` is an S3 option in vane's spelling (``storage_options`` of any call)."""
    return name in _S3_NAMES or name == "client_kwargs"


def canonical_s3_option(name: str) -> str:
    """The one name of the S3 option vane takes as ``name`` (``key`` -> ``access_key``)."""
    return _S3_NAMES[name]


def _s3_options(given: Mapping[str, Any], caller: str) -> dict[str, Any]:
    flat = dict(given)
    client = flat.pop("client_kwargs", None) or {}
    flat.update({k: v for k, v in dict(client).items() if k in ("endpoint_url", "region_name")})
    unknown = sorted(k for k in flat if k not in _S3_NAMES)
    if unknown:
        raise ConfigurationError(
            f"{caller}(): storage_options has {unknown}, which s3:// does not take; it takes "
            f"{', '.join(sorted(_S3_NAMES))} and client_kwargs"
        )
    out = {_S3_NAMES[k]: v for k, v in flat.items() if v is not None}
    for name, value in out.items():
        out[name] = _s3_value(name, value, caller)
    return out


def _s3_value(name: str, value: Any, caller: str) -> Any:
    """An S3 option's value as vane uses it: ``anonymous`` a bool (``"false"`` is not
    anonymous), ``max_attempts`` a whole number from 1, timeouts seconds (a number, or a
    duration as object_store writes them: ``"10s"``, ``"500ms"``, ``"1m"``); others as given."""
    if name == "anonymous":
        flag = flag_of(value)
        if flag is None:
            raise ConfigurationError(
                f"{caller}(): storage_options anon={value!r} is neither true nor false: give "
                "True or False"
            )
        return flag
    if name == "max_attempts":
        attempts = _whole(value)
        if attempts is None or attempts < 1:
            raise ConfigurationError(
                f"{caller}(): storage_options max_attempts={value!r} is not a number of "
                "attempts: give a whole number from 1"
            )
        return attempts
    if name in ("connect_timeout", "request_timeout"):
        seconds = seconds_of(value)
        if seconds is None or not 0 < seconds < float("inf"):
            raise ConfigurationError(
                f"{caller}(): storage_options {name}={value!r} is not a time: give seconds "
                "(10, 2.5) or a duration such as '10s' or '500ms'"
            )
        return seconds
    return value


def _whole(value: object) -> int | None:
    """A whole number given as an int (numpy's too), a float or text that is one; else None."""
    import math
    import operator

    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        pass
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


_DURATION = {"ms": 0.001, "s": 1.0, "m": 60.0}


def seconds_of(value: object) -> float | None:
    """A number of seconds, or a duration as object_store writes it (``"60s"``, ``"500ms"``,
    ``"1m"``), in seconds; None if it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().lower()
    try:
        return float(text)  # a number of seconds, written as text
    except ValueError:
        pass
    for unit in ("ms", "s", "m"):  # ("ms" before "s", which it ends with)
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * _DURATION[unit]
            except ValueError:
                return None
    return None


def flag_of(value: object) -> bool | None:
    """True or false as options are written (a bool, 1/0, or "true"/"false", "yes"/"no",
    "on"/"off" in any case); None if it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    return None


def options_for(
    protocol: str,
    given: Mapping[str, Any] | None,
    caller: str,
    configured: Mapping[str, Any] | None = None,
) -> Frozen:
    """The options a store of ``protocol`` gets: ``vane.configure(storage_options=...)`` (or
    ``configured``, the driver's, in a worker), then the call's own on top. Configured options
    may be flat (every protocol) or nested by protocol (``{"s3": {...}, "hf": {...}}``)."""
    from vane.config import get_config

    configured = dict(
        (configured if configured is not None else get_config().storage_options) or {}
    )
    merged: dict[str, Any] = {}
    nested = {k for k, v in configured.items() if isinstance(v, Mapping) and _URI.match(k + "://")}
    nested.discard("client_kwargs")
    for key, value in configured.items():
        if key not in nested:
            merged[key] = value
    merged.update(configured.get(protocol, {}))
    if given is not None:
        if not isinstance(given, Mapping):
            raise ConfigurationError(
                f"{caller}(): storage_options takes a dict, got {type(given).__name__}"
            )
        merged.update(given)
    if protocol in ("s3", "s3a"):
        return freeze(_s3_options(merged, caller))
    if protocol in HTTP:
        for name in _HTTP_NAMES & merged.keys():
            merged[name] = _s3_value(name, merged[name], caller)
    return freeze(merged)


def locate(
    url: str, storage_options: Mapping[str, Any] | None = None, caller: str = ""
) -> Location:
    """``url`` as a store and a path on it."""
    protocol = protocol_of(url)
    if protocol is None:
        raise ConfigurationError(f"{url!r} is a local path, not a URL")
    options = options_for(protocol, storage_options, caller)
    store = Store("s3" if protocol == "s3a" else protocol, options)
    return Location(store, _path_of(store.protocol, url))


def _path_of(protocol: str, url: str) -> str:
    """The path ``url`` names on its filesystem, as that filesystem spells the paths it lists
    (fsspec's memory filesystem roots them at "/"), so listed and given paths compare equal."""
    path = url.split("://", 1)[1]
    if protocol == "s3":
        return path
    try:
        import fsspec

        stripped: str = fsspec.get_filesystem_class(protocol)._strip_protocol(url)
    except (ImportError, ValueError):
        return path  # Store.filesystem() says what is missing
    return stripped


def locate_with(url: str, options: Frozen) -> Location:
    """``url`` on the store with ``options`` already merged (what a scan carries)."""
    protocol = protocol_of(url)
    if protocol is None:
        raise ConfigurationError(f"{url!r} is a local path, not a URL")
    store = Store("s3" if protocol == "s3a" else protocol, options)
    return Location(store, _path_of(store.protocol, url))


@dataclass(frozen=True)
class Location:
    """A path on a store (no protocol: ``bucket/key`` for S3, ``/x`` for memory)."""

    store: Store
    path: str

    @property
    def url(self) -> str:
        return self.store.url(self.path)

    def join(self, *parts: str) -> Location:
        return Location(self.store, "/".join([self.path.rstrip("/"), *parts]))

    def __str__(self) -> str:
        return self.url
