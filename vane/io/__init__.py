"""Sources and sinks: resolving input files, writing output files, committing atomically."""

from __future__ import annotations

from typing import IO

from vane.types import files as _files


class _Stores:
    """A ``vane.File`` in an object store opens through vane's stores (file_stores.py), with
    the credentials its process was given; that module loads when a first one is opened."""

    def open(self, url: str) -> IO[bytes]:
        from vane.io import file_stores

        return file_stores.open_remote(url)

    def size(self, url: str) -> int:
        from vane.io import file_stores

        return file_stores.size(url)


_files.use_remote_files(_Stores())
