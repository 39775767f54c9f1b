"""The S3 requests a read sends through botocore rather than pyarrow's S3 filesystem: the
listing, which says each object's ETag beside its size and time (pyarrow's ``FileInfo`` keeps
none), a HEAD request that says it too, and ranged GETs that name the ETag their object was
listed with (``If-Match``).

So an object replaced after its listing fails its read ("changed since it was listed") rather
than giving bytes of another version, however long after the listing the read comes; and a
read sends nothing before its GET (pyarrow's input file asks the object's size first, one HEAD
request per open, though the listing said it).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from vane.errors import SourceError
from vane.io.object_puts import s3_client
from vane.io.storage_errors import S3_ATTEMPTS, storage_errors

if TYPE_CHECKING:
    import pyarrow.fs as pafs

# A store is ``storage.Store`` (which imports this module): what is used of it is its
# protocol and options (``s3_client``), and its ``url`` and ``scrub`` (errors).
Store = Any


def etag_number(etag: str) -> int:
    """An ETag as a number that fits a stamp (``readers.Stamp``): equal ETags, equal numbers."""
    return int.from_bytes(hashlib.blake2b(etag.encode(), digest_size=7).digest(), "big")


def list_objects(
    store: Store, path: str, between: tuple[str, str] | None = None, wanted: int | None = None
) -> tuple[list[pafs.FileInfo], dict[str, str]]:
    """Every object under the prefix ``path`` (``bucket/key...``), recursively, as
    ``FileInfo``s, and each one's ETag by path. An empty prefix lists as empty.

    ``between`` (two paths under ``path``): only the keys from the first to the last are
    listed, as S3 lists keys in order: a few objects of a large prefix (a Ray task's share of
    a read) cost a request per thousand keys between them, not per thousand in the prefix;
    ``wanted``: how many of those keys are wanted (each request then asks for about as many)."""
    from pyarrow.fs import FileInfo, FileType

    bucket, _, prefix = path.strip("/").partition("/")
    prefix = prefix + "/" if prefix else ""
    window: dict[str, Any] = {}
    last = None
    if between is not None:
        first, last = (p.partition("/")[2] for p in between)
        if first[:-1]:  # S3 lists after the key given: one a character shorter sorts before
            window["StartAfter"] = first[:-1]
        if wanted is not None:  # pages of about as many keys as are wanted
            window["PaginationConfig"] = {"PageSize": min(1000, 2 * wanted + 8)}
    infos: list[FileInfo] = []
    etags: dict[str, str] = {}
    pages = s3_client(store).get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=bucket, Prefix=prefix, **window):
        for entry in page.get("Contents", []):
            key = entry["Key"]
            if last is not None and key > last:
                return infos, etags
            if key.endswith("/"):  # a "directory" marker: no data
                continue
            where = f"{bucket}/{key}"
            infos.append(
                FileInfo(where, FileType.File, mtime=entry["LastModified"], size=entry["Size"])
            )
            etags[where] = entry["ETag"]
    return infos, etags


def head_objects(store: Store, paths: list[str]) -> tuple[list[pafs.FileInfo], dict[str, str]]:
    """The objects at ``paths`` that exist, each as a ``FileInfo``, and their ETags."""
    from botocore.exceptions import ClientError
    from pyarrow.fs import FileInfo, FileType

    client = s3_client(store)
    infos: list[FileInfo] = []
    etags: dict[str, str] = {}
    for path in paths:
        bucket, _, key = path.partition("/")
        try:
            answer = client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                continue
            raise
        infos.append(
            FileInfo(
                path, FileType.File, mtime=answer["LastModified"], size=answer["ContentLength"]
            )
        )
        etags[path] = answer["ETag"]
    return infos, etags


def roots_above(store: Store, path: str, folders: set[str]) -> list[str]:
    """The prefixes that hold ``path``, and ``path`` itself, with a key under one of their
    ``folders`` (``object_commit``'s ``_vane_log`` and ``_vane_writes``: vane write roots),
    deepest first: one listing request each (the keys after ``<prefix>/_vane_``, grouped by their
    next ``/``), where ``object_commit.roots_above`` lists each folder apart."""
    import os

    client = s3_client(store)
    # by character, as S3 prefixes compare: "_vane_"
    shared = os.path.commonprefix(sorted(folders))  # noqa: RUF071
    parts = path.strip("/").split("/")
    bucket = parts[0]
    found = []
    for depth in range(len(parts), 0, -1):
        key = "/".join(parts[1:depth])
        prefix = f"{key}/{shared}" if key else shared
        answer = client.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
        names = {
            p["Prefix"].rstrip("/").rsplit("/", 1)[-1] for p in answer.get("CommonPrefixes", [])
        }
        if names & folders:
            found.append("/".join(parts[:depth]))
    return found


class S3Object:
    """An S3 object read by ranged GET requests (with the store's credentials, timeouts and
    retries, ``object_puts.s3_client``), each naming the object's ETag where it is known.
    Its reads keep no state, so they may run at once on several threads (``concurrent``)."""

    concurrent = True

    def __init__(self, store: Store, path: str, etag: str | None) -> None:
        self._store = store
        self._path = path
        self._bucket, _, self._key = path.partition("/")
        self._etag = etag
        self._client = s3_client(store)

    def read_at(self, size: int, offset: int) -> bytes:
        if size <= 0:
            return b""
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        where = self._store.url(self._path)
        condition = {"IfMatch": self._etag} if self._etag else {}
        for attempt in range(S3_ATTEMPTS):
            with storage_errors(where, "cannot read", self._store):
                try:
                    answer = self._client.get_object(
                        Bucket=self._bucket,
                        Key=self._key,
                        Range=f"bytes={offset}-{offset + size - 1}",
                        **condition,
                    )
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                        raise SourceError(
                            f"{where} changed since it was listed (its ETag is no longer "
                            f"{self._etag}): another write replaced it. Build the relation "
                            "again to read what is there now"
                        ) from None
                    raise
                try:
                    data: bytes = answer["Body"].read()
                except (ResponseStreamingError, ReadTimeoutError, ConnectionClosedError):
                    # botocore retries a request, not the reading of its answer's body
                    if attempt == S3_ATTEMPTS - 1:
                        raise
                    continue
                return data
        raise AssertionError("unreachable")

    def close(self) -> None:
        pass
