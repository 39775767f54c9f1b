"""The credentials a ``vane.File`` in an object store is opened with, in whichever process opens
it.

A file column holds references only (``STRUCT(url, size)``): storage options never enter the
data, the plan or ``explain()``, since they hold secrets. Instead a listing that was given
``storage_options=`` (``from_glob_path``, ``read_images``) remembers them for each bucket it
listed, in the driver; ``vane.configure(storage_options=...)`` applies to every other URL. Each
actor gets a snapshot of both when it starts (``snapshot`` in the driver, ``install`` in the
worker: a subprocess actor's INIT payload, a Ray actor's constructor), so a ``File`` opened in a
worker process uses the driver's credentials, not that process's empty settings. Thread actors
share the driver's process and read them directly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from vane.config import get_config
from vane.io.storage import (
    Location,
    freeze,
    locate_with,
    options_for,
    protocol_of,
    thaw,
)
from vane.io.storage_errors import Frozen, storage_errors

_lock = threading.Lock()
# "s3://bucket" -> the options its listing was given (configured ones merged in)
_buckets: dict[str, Frozen] = {}
# What a worker was sent (None in the driver, which reads its own configuration).
_installed: FileStores | None = None


@dataclass(frozen=True)
class FileStores:
    """The driver's storage options as a worker needs them. Its ``repr`` names the buckets
    and never a value: Ray and error messages may show an actor's constructor arguments."""

    buckets: Frozen = ()
    configured: Frozen = ()

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.buckets)
        return f"FileStores(buckets=[{names}], configured={bool(self.configured)})"


def _bucket(url: str) -> str:
    protocol, _, rest = url.partition("://")
    return f"{protocol.lower()}://{rest.split('/', 1)[0]}"


def remember(urls: Iterable[str], options: Frozen) -> None:
    """Files listed under ``urls`` are opened with ``options`` from now on, in every actor
    started after this (the last listing of a bucket decides)."""
    with _lock:
        for url in urls:
            if protocol_of(url) is not None:
                _buckets[_bucket(url)] = options


def snapshot() -> FileStores:
    """What the actors of a run started now are sent (driver side)."""
    if _installed is not None:  # a worker that starts workers (a Ray actor's subprocess)
        return _installed
    with _lock:
        buckets = tuple(sorted(_buckets.items()))
    return FileStores(buckets, freeze(get_config().storage_options or {}))


def install(stores: FileStores | None) -> None:
    """Use ``stores`` (the driver's) in this worker process."""
    global _installed
    _installed = stores


def location(url: str) -> Location:
    """``url`` on the store it is opened from: its bucket's remembered options, or the
    configured ones (the driver's, in a worker)."""
    stores = _installed
    if stores is not None:
        known = dict(stores.buckets)
        configured: Mapping[str, Any] | None = thaw(stores.configured)
    else:
        with _lock:
            known = dict(_buckets)
        configured = None
    options = known.get(_bucket(url))
    if options is None:
        options = options_for(protocol_of(url) or "", None, "vane.File", configured)
    return locate_with(url, options)


def open_remote(url: str) -> IO[bytes]:
    """The object at ``url``, open for reading; a failure is a ``StorageError`` naming it,
    with no credential in its text."""
    where = location(url)
    with storage_errors(url, "cannot open", where.store):
        stream: IO[bytes] = where.store.filesystem().open_input_stream(where.path)
    return stream


def size(url: str) -> int:
    """The object's size in bytes."""
    where = location(url)
    with storage_errors(url, "cannot find the size of", where.store):
        found = where.store.filesystem().get_file_info(where.path)
        if found.size is None:
            raise FileNotFoundError(url)
    return int(found.size)
