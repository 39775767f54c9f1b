"""The image functions' work on one batch, inside the worker that runs them: Pillow decodes,
converts, resizes, crops and encodes; ``vane.types.images`` turns pixels into Arrow columns.

Each function takes a batch's column as an Arrow array and returns one value per row. A row
that fails on its own (a corrupt file, a missing path) does not fail its neighbours: the batch
answers with ``RowResults``, and the step's ``on_error`` decides (raise naming the row, or a
null). Every function reads any image input: encoded bytes, a path or file column (read here,
in the worker), or decoded pixels in either image type.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from vane._deps import require
from vane.types.files import File, is_file_type
from vane.types.images import (
    IMAGE,
    fixed_image_type,
    from_numpy,
    image_shape,
    is_image_type,
    to_numpy,
)
from vane.udf.column_calls import RowResults

if TYPE_CHECKING:
    from PIL import Image

# Modes vane holds pixels in (channels 1, 3, 4); any other a file has is converted to one.
_KEPT_MODES = ("L", "RGB", "RGBA")
_MODE_OF_CHANNELS = {1: "L", 3: "RGB", 4: "RGBA"}


def _pil() -> Any:
    return require("PIL.Image", extra="image")


class _Undecodable(Exception):
    """Bytes Pillow cannot turn into an image (corrupt, truncated, or not an image)."""


def _decode_bytes(data: bytes) -> Image.Image:
    """The file's image, upright: EXIF orientation applied, as cameras and viewers do."""
    pil = _pil()
    from PIL import ImageOps

    try:
        with pil.open(io.BytesIO(data)) as image:
            image.load()
            upright = ImageOps.exif_transpose(image)
            return upright if upright is not None else image
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}".replace("<_io.BytesIO object", "<bytes")
        raise _Undecodable(
            f"the bytes are corrupt or not an image Pillow reads ({detail})"
        ) from exc


def _in_mode(image: Image.Image, mode: str | None) -> Image.Image:
    if mode is not None:
        return image if image.mode == mode else image.convert(mode)
    if image.mode in _KEPT_MODES:
        return image
    has_alpha = "A" in image.getbands() or "transparency" in image.info
    return image.convert("RGBA" if has_alpha else "RGB")


def _inputs(array: pa.Array) -> list[Callable[[], Image.Image] | None]:
    """For each row, how to get its image (None for a null): decoding happens when called, so
    that a failure belongs to its row."""
    pil = _pil()
    if is_image_type(array.type):

        def from_pixels(pixels: np.ndarray) -> Callable[[], Image.Image]:
            channels = pixels.shape[2]
            return lambda: pil.fromarray(
                pixels[:, :, 0] if channels == 1 else pixels, _MODE_OF_CHANNELS[channels]
            )

        return [None if p is None else from_pixels(p) for p in to_numpy(array)]
    kind = array.type
    values = array.to_pylist()
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return [None if v is None else _decoder(v) for v in values]
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or is_file_type(kind):
        return [None if v is None else _reader(File.from_value(v)) for v in values]
    raise TypeError(
        f"an image function got a column of {kind}; it takes encoded images (BLOB), paths or "
        "file references, or decoded images"
    )


def _decoder(data: bytes) -> Callable[[], Image.Image]:
    return lambda: _decode_bytes(data)


def _reader(file: File | None) -> Callable[[], Image.Image]:
    assert file is not None
    return lambda: _decode_bytes(file.read())


def _pool() -> ThreadPoolExecutor:
    """Threads for the rows of a batch, one per core, shared by the worker's calls: Pillow
    releases the GIL while it decodes and resizes, so one actor uses every core."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            workers = max(1, min(8, os.cpu_count() or 1))
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix="vane-images")
        return _POOL


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _each(
    array: pa.Array, work: Callable[[Image.Image], Any], what: str
) -> tuple[list[Any], list[str | None]]:
    def one(get: Callable[[], Image.Image] | None) -> tuple[Any, str | None]:
        if get is None:
            return None, None
        try:
            return work(get()), None
        except Exception as exc:  # one bad file fails its own row only
            return None, f"cannot {what}: {_reason(exc)}"

    inputs = _inputs(array)
    results = list(_pool().map(one, inputs)) if len(inputs) > 1 else [one(g) for g in inputs]
    return [value for value, _ in results], [error for _, error in results]


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, _Undecodable) else f"{type(exc).__name__}: {exc}"


def _answer(values: Any, errors: list[str | None]) -> Any:
    return RowResults(values, errors) if any(e is not None for e in errors) else values


def _pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.uint8)


def decode(array: pa.Array, mode: str | None) -> Any:
    """Decoded images of any shape (``IMAGE``)."""
    values, errors = _each(array, lambda image: _pixels(_in_mode(image, mode)), "decode the image")
    return _answer(from_numpy(values, IMAGE), errors)


def resize(array: pa.Array, width: int, height: int, mode: str) -> Any:
    """Images of one shape: ``height x width`` in ``mode``."""
    pil = _pil()

    def work(image: Image.Image) -> np.ndarray:
        image = _in_mode(image, mode)
        if image.size != (width, height):
            image = image.resize((width, height), pil.Resampling.BILINEAR)
        return _pixels(image)

    values, errors = _each(array, work, "resize the image")
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    return _answer(from_numpy(values, fixed_image_type(height, width, channels)), errors)


def crop(array: pa.Array, box: tuple[int, int, int, int]) -> Any:
    def work(image: Image.Image) -> np.ndarray:
        left, top, right, bottom = box
        return _pixels(_in_mode(image, None).crop((left, top, right, bottom)))

    values, errors = _each(array, work, "crop the image")
    return _answer(from_numpy(values, IMAGE), errors)


def convert(array: pa.Array, mode: str) -> Any:
    values, errors = _each(array, lambda image: _pixels(_in_mode(image, mode)), "convert the image")
    return _answer(from_numpy(values, IMAGE), errors)


def encode(array: pa.Array, format: str, quality: int | None) -> Any:
    def work(image: Image.Image) -> bytes:
        if format.upper() in ("JPEG", "JPG") and image.mode not in ("L", "RGB"):
            image = image.convert("RGB")  # JPEG holds no alpha channel
        out = io.BytesIO()
        options = {} if quality is None else {"quality": quality}
        image.save(out, format=format, **options)
        return out.getvalue()

    values, errors = _each(array, work, f"encode the image as {format}")
    return _answer(pa.array(values, pa.binary()), errors)


def to_tensor(array: pa.Array, width: int, height: int, mode: str, scale: float) -> Any:
    """``float32`` pixels of one shape, multiplied by ``scale`` (1/255 gives 0..1)."""
    pixels = resize(array, width, height, mode)
    result: pa.Array = pixels.values if isinstance(pixels, RowResults) else pixels
    shape = image_shape(result.type)
    assert shape is not None
    images = to_numpy(result)
    floats = np.zeros((len(images), *shape), dtype=np.float32)
    for row, image in enumerate(images):
        if image is not None:
            floats[row] = image.astype(np.float32) * np.float32(scale)
    values: pa.Array = pa.array(floats.reshape(-1), pa.float32())
    for size in (shape[2], shape[1]):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    tensors = pa.FixedSizeListArray.from_arrays(
        values, shape[0], mask=result.is_null() if result.null_count else None
    )
    if isinstance(pixels, RowResults):
        return RowResults(tensors, pixels.errors)
    return tensors
