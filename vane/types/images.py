"""Image columns: how images are held in Arrow, and their pixels as numpy arrays.

An image column is one of three Arrow types, chosen so that DuckDB, Parquet, Arrow IPC and
every UDF backend carry it unchanged (DuckDB drops Arrow extension types, so a canonical
``arrow.fixed_shape_tensor`` would come out of the first SQL step without its shape):

- **encoded**: ``BLOB`` (``pa.binary()``), the file's bytes, until something decodes them;
- **fixed shape**: every image ``height x width x channels`` ``uint8`` pixels, as nested
  fixed-size lists, DuckDB's ``UTINYINT[c][w][h]``. The shape lives in the type, and the pixels
  of a batch are one contiguous buffer: ``map_batches(batch_format="numpy")`` hands them as one
  ``(n, h, w, c)`` array without copying, and ``to_tensor_extension`` views them as Arrow's
  canonical ``fixed_shape_tensor`` (same buffer, no copy) for libraries that speak it;
- **any shape**: ``STRUCT(data BLOB, height INTEGER, width INTEGER, channels INTEGER)``, the
  raw pixels row-major (height, width, channels) and their shape, for images of mixed sizes.

Channels are 1 (``L``), 3 (``RGB``) or 4 (``RGBA``). This module knows only Arrow and numpy;
decoding and encoding (Pillow) live in ``vane.functions``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from vane.errors import SchemaError

__all__ = [
    "IMAGE",
    "fixed_image_type",
    "from_numpy",
    "from_tensor_extension",
    "image_shape",
    "is_image_type",
    "tensor_storage",
    "to_numpy",
    "to_tensor_extension",
]

IMAGE = pa.struct(
    [
        pa.field("data", pa.binary()),
        pa.field("height", pa.int32()),
        pa.field("width", pa.int32()),
        pa.field("channels", pa.int32()),
    ]
)
CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}


def fixed_image_type(height: int, width: int, channels: int) -> pa.DataType:
    """The type of a column of ``height x width x channels`` images."""
    return pa.list_(pa.list_(pa.list_(pa.uint8(), channels), width), height)


def image_shape(arrow_type: pa.DataType) -> tuple[int, int, int] | None:
    """``(height, width, channels)`` of a fixed-shape image type (a canonical tensor type of
    rank 3 included), else None."""
    if isinstance(arrow_type, pa.FixedShapeTensorType):
        shape = tuple(arrow_type.shape)
        if len(shape) == 3 and arrow_type.value_type == pa.uint8():
            return (int(shape[0]), int(shape[1]), int(shape[2]))
        return None
    dims = []
    while pa.types.is_fixed_size_list(arrow_type):
        dims.append(arrow_type.list_size)
        arrow_type = arrow_type.value_type
    if len(dims) == 3 and arrow_type == pa.uint8():
        return (dims[0], dims[1], dims[2])
    return None


def is_image_type(arrow_type: pa.DataType) -> bool:
    """Whether a column of this type holds decoded images (not encoded bytes)."""
    return arrow_type == IMAGE or image_shape(arrow_type) is not None


def _flat(array: pa.Array) -> tuple[np.ndarray, tuple[int, int, int]]:
    """A fixed-shape column's pixels as one (n, h, w, c) array over Arrow's buffer (no copy):
    null rows hold whatever bytes lie in their place. Each level's offset is followed down to the
    ``uint8`` leaf, so a sliced column reads its own rows."""
    shape = image_shape(array.type)
    assert shape is not None
    if isinstance(array, pa.ExtensionArray):  # one flat list of h * w * c per row
        array = array.storage
        sizes: tuple[int, ...] = (shape[0] * shape[1] * shape[2],)
    else:
        sizes = shape
    position, level = array.offset, array
    for size in sizes:
        level = level.values
        position = position * size + level.offset
    pixels = np.frombuffer(level.buffers()[1], dtype=np.uint8)
    count = len(array) * shape[0] * shape[1] * shape[2]
    return pixels[position : position + count].reshape(len(array), *shape), shape


def to_numpy(array: pa.Array | pa.ChunkedArray) -> list[np.ndarray | None]:
    """Each row's pixels as an ``(h, w, c)`` ``uint8`` array (a view where Arrow's buffer
    allows), None for a null row."""
    if isinstance(array, pa.ChunkedArray):
        return [image for chunk in array.chunks for image in to_numpy(chunk)]
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if image_shape(array.type) is not None:
        pixels, _ = _flat(array)
        return [pixels[i] if valid[i] else None for i in range(len(array))]
    if array.type != IMAGE:
        raise SchemaError(
            f"a column of {array.type} is not decoded images; decode it first with "
            "vane.functions.decode_image(...)"
        )
    data = array.field("data")
    heights = array.field("height").to_pylist()
    widths = array.field("width").to_pylist()
    channels = array.field("channels").to_pylist()
    out: list[np.ndarray | None] = []
    for i in range(len(array)):
        value = data[i].as_buffer() if valid[i] else None
        if value is None:
            out.append(None)
            continue
        out.append(np.frombuffer(value, dtype=np.uint8).reshape(heights[i], widths[i], channels[i]))
    return out


def from_numpy(images: Sequence[np.ndarray | None], arrow_type: pa.DataType = IMAGE) -> pa.Array:
    """Arrays of ``(h, w, c)`` (or ``(h, w)``) ``uint8`` pixels as a column of ``arrow_type``:
    ``IMAGE``, or a fixed-shape type every non-null image must fit."""
    images = [None if i is None else (i[:, :, None] if i.ndim == 2 else i) for i in images]
    shape = image_shape(arrow_type)
    if shape is None:
        if arrow_type != IMAGE:
            raise SchemaError(f"{arrow_type} is not an image type")
        present = [i for i in images if i is not None]
        return pa.StructArray.from_arrays(
            [
                pa.array(
                    [None if i is None else np.ascontiguousarray(i).tobytes() for i in images],
                    pa.binary(),
                ),
                pa.array([None if i is None else i.shape[0] for i in images], pa.int32()),
                pa.array([None if i is None else i.shape[1] for i in images], pa.int32()),
                pa.array([None if i is None else i.shape[2] for i in images], pa.int32()),
            ],
            fields=list(IMAGE),
            mask=pa.array([i is None for i in images], pa.bool_())
            if len(present) < len(images)
            else None,
        )
    pixels = np.zeros((len(images), *shape), dtype=np.uint8)
    for row, image in enumerate(images):
        if image is not None:
            if image.shape != shape:
                raise SchemaError(
                    f"an image of shape {image.shape} does not fit a column of {shape} images; "
                    "resize it first (vane.functions.resize_image)"
                )
            pixels[row] = image
    values: pa.Array = pa.array(pixels.reshape(-1), pa.uint8())
    for size in (shape[2], shape[1]):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    mask = pa.array([i is None for i in images], pa.bool_())
    return pa.FixedSizeListArray.from_arrays(values, shape[0], mask=mask)


def to_tensor_extension(array: pa.Array) -> pa.FixedShapeTensorArray:
    """A fixed-shape image column as Arrow's canonical ``arrow.fixed_shape_tensor`` (shape
    ``(h, w, c)``, ``uint8``), over the same buffer: for libraries that read that type. (A null
    image is a null tensor.)"""
    shape = image_shape(array.type)
    if shape is None or isinstance(array, pa.ExtensionArray):
        if isinstance(array, pa.FixedShapeTensorArray):
            return array
        raise SchemaError(f"a column of {array.type} is not fixed-shape images")
    tensor_type = pa.fixed_shape_tensor(pa.uint8(), shape)
    pixels, _ = _flat(array)
    storage = pa.FixedSizeListArray.from_arrays(
        pa.array(pixels.reshape(-1)), shape[0] * shape[1] * shape[2], mask=_null_mask(array)
    )
    tensors: pa.FixedShapeTensorArray = pa.ExtensionArray.from_storage(tensor_type, storage)
    return tensors


def from_tensor_extension(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Arrow's ``fixed_shape_tensor`` (any value type and rank) as nested fixed-size lists,
    which DuckDB holds with their shape (it drops the extension type): the same buffer when the
    dimensions are in order, else the values laid out in the logical order."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array(
            [from_tensor_extension(c) for c in array.chunks], type=tensor_storage(array.type)
        )
    kind = array.type
    if not isinstance(kind, pa.FixedShapeTensorType):
        raise SchemaError(f"a column of {kind} is not a fixed-shape tensor")
    shape = _logical_shape(kind)
    storage = array.storage
    size = storage.type.list_size
    values = storage.values.slice(storage.offset * size, len(storage) * size)
    permutation = list(kind.permutation or range(len(shape)))
    if permutation != sorted(permutation):  # a transposed layout: put it in logical order
        if storage.null_count:
            raise SchemaError(
                "a fixed_shape_tensor column with a permutation and nulls cannot be held; "
                "return the tensors in their logical order"
            )
        logical = array.to_numpy_ndarray()
        values = pa.array(logical.reshape(-1), kind.value_type)
    for dim in reversed(shape[1:]):
        values = pa.FixedSizeListArray.from_arrays(values, dim)
    return pa.FixedSizeListArray.from_arrays(values, shape[0], mask=_null_mask(storage))


def tensor_storage(kind: pa.DataType) -> pa.DataType:
    """The nested fixed-size list type a ``fixed_shape_tensor`` type is held as."""
    assert isinstance(kind, pa.FixedShapeTensorType)
    held = kind.value_type
    for dim in reversed(_logical_shape(kind)):
        held = pa.list_(held, dim)
    return held


def _logical_shape(kind: pa.FixedShapeTensorType) -> list[int]:
    """The dimensions in logical order: ``shape`` is the physical layout's, ``permutation``
    says which physical dimension each logical one is (as ``to_numpy_ndarray`` reads it)."""
    shape = [int(d) for d in kind.shape]
    permutation = kind.permutation or range(len(shape))
    return [shape[int(p)] for p in permutation]


def _null_mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None
