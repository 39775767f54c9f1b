"""The file functions' work on one batch, in the worker: file references, sizes, bytes."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

from vane.types.files import FILE, File, is_file_type, local_path, remote_size
from vane.udf.column_calls import RowResults


def _files(array: pa.Array) -> list[File | None]:
    kind = array.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_file_type(kind)):
        raise TypeError(
            f"a file function got a column of {kind}; it takes paths or URLs (VARCHAR) or a "
            "file column (vane.functions.file)"
        )
    return [File.from_value(value) for value in array.to_pylist()]


def _size(file: File) -> int:
    path = local_path(file.url)
    if path is not None:
        return os.stat(path).st_size
    if file.size is not None:
        return file.size
    return remote_size(file.url)


def _each(array: pa.Array, work: Any, kind: pa.DataType, what: str) -> Any:
    values: list[Any] = []
    errors: list[str | None] = []
    for file in _files(array):
        if file is None:
            values.append(None)
            errors.append(None)
            continue
        try:
            values.append(work(file))
            errors.append(None)
        except Exception as exc:  # a missing file fails its own row
            values.append(None)
            errors.append(f"cannot {what} {file.url}: {type(exc).__name__}: {exc}")
    column = pa.array(values, kind)
    return RowResults(column, errors) if any(e is not None for e in errors) else column


def file_refs(array: pa.Array) -> Any:
    """File references (``FILE``) with each file's size."""

    def work(file: File) -> dict[str, Any]:
        return {"url": file.url, "size": _size(file)}

    return _each(array, work, FILE, "find")


def sizes(array: pa.Array) -> Any:
    return _each(array, _size, pa.int64(), "find the size of")


def contents(array: pa.Array) -> Any:
    return _each(array, File.read, pa.binary(), "read")
