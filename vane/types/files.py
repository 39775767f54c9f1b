"""File columns: a reference to a file (a local path or a URL, and its size), and ``vane.File``,
what a UDF receives for each value of such a column.

A file column is ``STRUCT(url VARCHAR, size BIGINT)``: a plain struct, so DuckDB, Parquet and
every UDF backend carry it unchanged (DuckDB drops Arrow extension types). Only the reference
travels; the bytes are read where the UDF runs, when it asks (Daft's ``daft.File``):

>>> import vane
>>> f = vane.File("/etc/hostname")  # doctest: +SKIP
>>> f.read()[:4]  # doctest: +SKIP

A row function whose argument is a file column gets a ``vane.File``; a batch function gets the
struct array, and ``File.from_value`` turns one of its values into a ``File``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import IO, Any, Protocol

import pyarrow as pa

from vane.errors import SourceError, SourceNotFoundError, VaneError

__all__ = ["FILE", "File", "is_file_type"]

FILE = pa.struct([pa.field("url", pa.string()), pa.field("size", pa.int64())])

# Seconds an HTTP(S) file may take to answer when it is opened; url_download has its own.
_HTTP_TIMEOUT_S = 60.0


class RemoteFiles(Protocol):
    """How objects in a store (``s3://``, ``gs://``...) are opened and sized."""

    def open(self, url: str) -> IO[bytes]: ...

    def size(self, url: str) -> int: ...


class _ByUri:
    """pyarrow's own resolution of a URL (its environment's credentials): what opens remote
    files until ``vane.io`` hands down its stores, which it does as ``import vane`` loads it."""

    def open(self, url: str) -> IO[bytes]:
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(url)
        stream: IO[bytes] = filesystem.open_input_stream(inner)
        return stream

    def size(self, url: str) -> int:
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(url)
        size = filesystem.get_file_info(inner).size
        if size is None:
            raise FileNotFoundError(url)
        return int(size)


# The types sit below vane.io, which knows the credentials a worker was sent
# (io/file_stores.py): io installs its opener here rather than this module importing it.
_remote: RemoteFiles = _ByUri()


def use_remote_files(remote: RemoteFiles) -> None:
    global _remote
    _remote = remote


def remote_size(url: str) -> int:
    """The size in bytes of the object at ``url`` (a URL of a store)."""
    return _remote.size(url)


def is_file_type(arrow_type: pa.DataType) -> bool:
    return bool(arrow_type == FILE)


def _scheme(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    # A Windows drive letter (C:\...) parses as a one-letter scheme: that is a local path.
    return parsed.scheme.lower() if len(parsed.scheme) > 1 else ""


def local_path(url: str) -> str | None:
    """The local path ``url`` names (a plain path or ``file://``), None for a remote URL."""
    scheme = _scheme(url)
    if scheme == "":
        return os.path.expanduser(url)
    if scheme == "file":
        return urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    return None


@dataclass(frozen=True)
class File:
    """A file a UDF can open: ``url`` is a local path, ``file://``, ``http(s)://`` or any
    protocol vane reads (``s3://``, ``gs://``, ``hf://``...: through vane's stores, with the
    storage options its bucket was listed with, else the configured ones; see
    io/file_stores.py); ``size`` in bytes if known. Nothing is read until ``open()``,
    ``read()`` or ``to_tempfile()``."""

    url: str
    size: int | None = None

    @classmethod
    def from_value(cls, value: Any) -> File | None:
        """A value of a file column (a dict, as Arrow gives it) or a path as a ``File``."""
        if value is None or isinstance(value, File):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls(os.fspath(value))
        if isinstance(value, dict) and isinstance(value.get("url"), str):
            return cls(value["url"], value.get("size"))
        raise SourceError(f"{value!r} is not a file reference (a path, a URL or a file column)")

    def open(self) -> IO[bytes]:
        """The file, open for reading bytes (close it, or use ``with``)."""
        import http.client  # (with urllib.request, ssl: here, not in every job's import)
        import urllib.request

        path = local_path(self.url)
        try:
            if path is not None:
                return open(path, "rb")  # the caller closes it
            if _scheme(self.url) in ("http", "https"):
                response: IO[bytes] = urllib.request.urlopen(self.url, timeout=_HTTP_TIMEOUT_S)
                return response
            return _remote.open(self.url)
        except VaneError:  # a store's error, translated already (with no credential in it)
            raise
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"the file {self.url!r} does not exist") from exc
        except (OSError, pa.ArrowException, http.client.HTTPException) as exc:
            # (a server whose reply is not HTTP: http.client's BadStatusLine, not an OSError)
            raise SourceError(f"cannot open the file {self.url!r}: {exc}") from exc

    def read(self) -> bytes:
        """All of the file's bytes."""
        with self.open() as handle:
            return handle.read()

    def to_tempfile(self) -> _TempFile:
        """A local copy for libraries that want a path (``with f.to_tempfile() as tmp:
        load(tmp.name)``); a local file is handed as itself, nothing copied or deleted."""
        path = local_path(self.url)
        if path is not None:
            return _TempFile(path, delete=False)
        suffix = os.path.splitext(urllib.parse.urlsplit(self.url).path)[1]
        handle, name = tempfile.mkstemp(prefix="vane-file-", suffix=suffix)
        try:
            with os.fdopen(handle, "wb") as out, self.open() as source:
                shutil.copyfileobj(source, out)
        except BaseException:
            os.unlink(name)
            raise
        return _TempFile(name, delete=True)

    def __fspath__(self) -> str:
        path = local_path(self.url)
        if path is None:
            raise SourceError(
                f"{self.url!r} is not a local file; use to_tempfile() for a local copy"
            )
        return path


class _TempFile:
    """A path to read, and the copy removed on exit when there is one."""

    def __init__(self, name: str, *, delete: bool) -> None:
        self.name = name
        self._delete = delete

    def __fspath__(self) -> str:
        return self.name

    def __enter__(self) -> _TempFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._delete and os.path.exists(self.name):
            os.unlink(self.name)
