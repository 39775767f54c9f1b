"""Functions over images, files and URLs, as expressions for ``select`` and ``with_column``.

>>> import vane
>>> from vane import functions as F
>>> rel = vane.from_glob_path("photos/*.jpg")  # doctest: +SKIP
>>> rel.with_column("thumb", F.resize_image(F.read_bytes("path"), 64, 64))  # doctest: +SKIP

Each is a built-in column function: calling it builds a UDF call in the expression, which the
optimizer lifts into a UDF step like any ``@vane.func``'s, so the work runs in batches inside
the workers (never in the driver), with the steps' batching, retries, ``on_error`` and progress.
They run on the thread backend unless configured otherwise: Pillow and the network release the
GIL, and ``url_download`` is ``async`` (many requests in flight on one actor's event loop).

Each image function takes ``execution_backend=`` (``"subprocess_actor"`` decodes in worker
processes, each with its own GIL) and ``batch_size=`` (64 rows: decoded images are large).

A row that fails on its own (a corrupt image, a missing file, a 404) fails only itself:
``on_error="raise"`` (the default) stops with an error naming the row, ``"null"`` gives a null
(and ``error_column=`` keeps why).

Image columns are encoded bytes (``BLOB``) until decoded, then pixels: ``decode_image`` gives
images of any shape (``STRUCT(data, height, width, channels)``), ``resize_image`` images of one
shape (``UTINYINT[c][w][h]``, handed to ``map_batches(batch_format="numpy")`` as one
``(n, h, w, c)`` array). Every image function takes any of these, or paths and file references
(read in the worker). See ``vane.types.images`` and docs/multimodal.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from vane._arguments import checked
from vane.errors import ConfigurationError
from vane.ir.expr import Expr, col
from vane.types.files import FILE
from vane.types.images import CHANNELS, IMAGE, fixed_image_type
from vane.udf.column import ClassUdf, UdfOptions, make_column_udf

from . import _files, _images

__all__ = [
    "convert_image",
    "crop_image",
    "decode_image",
    "encode_image",
    "file",
    "file_size",
    "image_to_tensor",
    "read_bytes",
    "resize_image",
    "url_download",
]

ColumnArg = str | Expr
# Rows per batch of the image functions: a decoded image is large (a 1080p frame is 6 MB), so
# a batch of the engine's default size would hold gigabytes in flight.
IMAGE_BATCH_ROWS = 64


def _column(value: ColumnArg, name: str) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return col(value)
    raise ConfigurationError(
        f"{name}() takes a column name or an expression such as vane.col('image'), got "
        f"{type(value).__name__}"
    )


def _mode(mode: str | None, name: str, *, optional: bool = False) -> None:
    if mode is None and optional:
        return
    if mode not in CHANNELS:
        raise ConfigurationError(
            f"{name}(): mode={mode!r} is not one vane holds pixels in; use 'RGB', 'RGBA' or 'L'"
            + (" (or None to keep the file's own)" if optional else "")
        )


def _size(value: Any, what: str, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name}(): {what} must be a positive integer, got {value!r}")


def _call(
    name: str,
    fn: Callable[..., Any],
    return_type: pa.DataType,
    column: ColumnArg,
    *constants: Any,
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int | None = None,
) -> Expr:
    options = UdfOptions(
        batch_size=batch_size,
        on_error=on_error,
        error_column=error_column,
        backend=execution_backend,
    )
    udf = make_column_udf(fn, name=name, return_dtype=return_type, batch=True, options=options)
    return udf(_column(column, name), *constants)


@checked
def decode_image(
    column: ColumnArg,
    *,
    mode: str | None = "RGB",
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """Decoded images of any shape from encoded bytes, paths or file references, upright
    (EXIF orientation applied) and in ``mode`` (``"RGB"``, ``"RGBA"``, ``"L"``; ``None`` keeps
    the file's, CMYK and palettes becoming RGB or RGBA)."""
    _mode(mode, "decode_image", optional=True)
    return _call(
        "decode_image", _images.decode, IMAGE, column, mode,
        on_error=on_error, error_column=error_column,
        execution_backend=execution_backend,
        batch_size=batch_size,
    )  # fmt: skip


@checked
def resize_image(
    column: ColumnArg,
    width: int,
    height: int,
    *,
    mode: str = "RGB",
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """Images of one shape, ``height x width`` in ``mode`` (bilinear), as ``UTINYINT[c][w][h]``:
    a model's input size. Decodes what is not decoded yet."""
    _size(width, "width", "resize_image")
    _size(height, "height", "resize_image")
    _mode(mode, "resize_image")
    kind = fixed_image_type(height, width, CHANNELS[mode])
    return _call(
        "resize_image", _images.resize, kind, column, width, height, mode,
        on_error=on_error, error_column=error_column,
        execution_backend=execution_backend,
        batch_size=batch_size,
    )  # fmt: skip


@checked
def crop_image(
    column: ColumnArg,
    box: Sequence[int],
    *,
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """The part of each image inside ``box = (left, top, right, bottom)`` in pixels (Pillow's
    convention; past the edge is black)."""
    if len(box) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in box):
        raise ConfigurationError(f"crop_image(): box is (left, top, right, bottom), got {box!r}")
    left, top, right, bottom = box
    if right <= left or bottom <= top:
        raise ConfigurationError(
            f"crop_image(): box {tuple(box)} is empty: right must exceed left, bottom top"
        )
    return _call(
        "crop_image", _images.crop, IMAGE, column, tuple(box),
        on_error=on_error, error_column=error_column,
        execution_backend=execution_backend,
        batch_size=batch_size,
    )  # fmt: skip


@checked
def convert_image(
    column: ColumnArg,
    mode: str,
    *,
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """Images in another mode: ``"RGB"``, ``"RGBA"`` or ``"L"`` (grey)."""
    _mode(mode, "convert_image")
    return _call(
        "convert_image", _images.convert, IMAGE, column, mode,
        on_error=on_error, error_column=error_column,
        execution_backend=execution_backend,
        batch_size=batch_size,
    )  # fmt: skip


@checked
def encode_image(
    column: ColumnArg,
    format: str = "PNG",
    *,
    quality: int | None = None,
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """Images as encoded bytes (``BLOB``) in ``format``: any Pillow writes (``"PNG"``,
    ``"JPEG"`` with its ``quality``, ``"WEBP"``, ...). JPEG drops an alpha channel."""
    if not isinstance(format, str) or not format:
        raise ConfigurationError(f"encode_image(): format is a name such as 'PNG', got {format!r}")
    return _call(
        "encode_image", _images.encode, pa.binary(), column, format.upper(), quality,
        on_error=on_error, error_column=error_column,
        execution_backend=execution_backend,
        batch_size=batch_size,
    )  # fmt: skip


@checked
def image_to_tensor(
    column: ColumnArg,
    width: int,
    height: int,
    *,
    mode: str = "RGB",
    scale: float = 1 / 255,
    on_error: str = "raise",
    error_column: str | None = None,
    execution_backend: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """A model's input: each image resized to ``height x width`` in ``mode``, as ``float32``
    pixels times ``scale`` (0..1 by default), ``FLOAT[c][w][h]`` (rows, height, width,
    channels under ``batch_format="numpy"``)."""
    _size(width, "width", "image_to_tensor")
    _size(height, "height", "image_to_tensor")
    _mode(mode, "image_to_tensor")
    channels = CHANNELS[mode]
    kind = pa.list_(pa.list_(pa.list_(pa.float32(), channels), width), height)
    return _call(
        "image_to_tensor", _images.to_tensor, kind, column, width, height, mode, float(scale),
        on_error=on_error, error_column=error_column,
        execution_backend=execution_backend,
        batch_size=batch_size,
    )  # fmt: skip


@checked
def file(column: ColumnArg, *, on_error: str = "raise", error_column: str | None = None) -> Expr:
    """File references (``STRUCT(url, size)``) from paths or URLs: a row function given one
    gets a ``vane.File`` to ``open()``, ``read()`` or copy ``to_tempfile()`` where it runs."""
    return _call(
        "file", _files.file_refs, FILE, column, on_error=on_error, error_column=error_column
    )


@checked
def file_size(
    column: ColumnArg, *, on_error: str = "raise", error_column: str | None = None
) -> Expr:
    """Each file's size in bytes (``BIGINT``), from paths, URLs or file references."""
    return _call(
        "file_size", _files.sizes, pa.int64(), column, on_error=on_error, error_column=error_column
    )


@checked
def read_bytes(
    column: ColumnArg,
    *,
    on_error: str = "raise",
    error_column: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """Each file's bytes (``BLOB``), from paths, URLs or file references, read in the worker.
    For many HTTP URLs, ``url_download`` fetches them concurrently."""
    return _call(
        "read_bytes", _files.contents, pa.binary(), column,
        on_error=on_error, error_column=error_column, batch_size=batch_size,
    )  # fmt: skip


@checked
def url_download(
    column: ColumnArg,
    *,
    max_connections: int = 32,
    on_error: str = "raise",
    timeout: float | None = 30.0,
    max_retries: int = 3,
    error_column: str | None = None,
    batch_size: int = IMAGE_BATCH_ROWS,
) -> Expr:
    """Each URL's body (``BLOB``), fetched concurrently with at most ``max_connections`` open
    to one host per actor; ``timeout`` seconds per request (None: no limit). Connection
    errors, resets, timeouts, 429 and 5xx are retried up to ``max_retries`` times with
    exponential backoff; a 404 or a certificate or TLS failure is final at once. A URL that
    still fails is an error naming its row (``on_error="raise"``) or a null (``"null"``, with
    ``error_column=`` for why).
    Local paths and ``file://`` are read from disk."""
    _size(max_connections, "max_connections", "url_download")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigurationError(
            f"url_download(): max_retries must be an integer >= 0, got {max_retries!r}"
        )
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise ConfigurationError(
            f"url_download(): timeout is seconds > 0 (or None), got {timeout!r}"
        )
    from ._urls import Downloader  # asyncio and aiohttp load for downloads only

    options = UdfOptions(batch_size=batch_size, on_error=on_error, error_column=error_column)
    downloader = ClassUdf(Downloader, options)(max_connections, timeout, max_retries)
    udf = make_column_udf(
        Downloader.download,
        name="url_download",
        return_dtype=pa.binary(),
        batch=True,
        options=options,
        owner=downloader,
        skip_self=True,
    )
    return udf(_column(column, "url_download"))
