"""Image columns in Arrow: pixels in and out of both image types exactly, slices reading their
own rows, and the canonical fixed_shape_tensor over the same pixels."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from vane.errors import SchemaError
from vane.types.files import FILE, File
from vane.types.images import (
    IMAGE,
    fixed_image_type,
    from_numpy,
    from_tensor_extension,
    image_shape,
    is_image_type,
    tensor_storage,
    to_numpy,
    to_tensor_extension,
)

shapes = st.tuples(st.integers(1, 5), st.integers(1, 5), st.sampled_from([1, 3, 4]))


@st.composite
def same_shape_images(draw: st.DrawFn) -> tuple[tuple[int, int, int], list[np.ndarray | None]]:
    shape = draw(shapes)
    images = draw(
        st.lists(st.none() | arrays(np.uint8, shape), min_size=1, max_size=6)  # type: ignore[arg-type]
    )
    return shape, images


def _same(got: list[np.ndarray | None], expected: list[np.ndarray | None]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g is None) == (e is None)
        if e is not None:
            assert g is not None and g.shape == e.shape and np.array_equal(g, e)


@given(same_shape_images(), st.integers(0, 6))
def test_fixed_shape_images_round_trip_and_slices_read_their_rows(case, start):
    shape, images = case
    column = from_numpy(images, fixed_image_type(*shape))
    assert image_shape(column.type) == shape and is_image_type(column.type)
    _same(to_numpy(column), images)
    start = min(start, len(images))
    _same(to_numpy(column.slice(start)), images[start:])


@given(st.lists(st.none() | shapes.flatmap(lambda s: arrays(np.uint8, s)), max_size=6))
def test_images_of_any_shape_round_trip(images):
    column = from_numpy(images, IMAGE)
    assert column.type == IMAGE and column.null_count == sum(i is None for i in images)
    _same(to_numpy(column), images)
    _same(to_numpy(pa.chunked_array([column, column])), images + images)


@given(same_shape_images())
def test_the_canonical_tensor_type_views_the_same_pixels(case):
    shape, images = case
    column = from_numpy(images, fixed_image_type(*shape))
    tensors = to_tensor_extension(column)
    assert tensors.type == pa.fixed_shape_tensor(pa.uint8(), shape)
    _same(to_numpy(tensors), images)
    assert from_tensor_extension(tensors).equals(column)


def test_an_image_that_does_not_fit_the_shape_is_refused_with_the_fix():
    with pytest.raises(SchemaError, match="resize it first"):
        from_numpy([np.zeros((2, 2, 3), np.uint8)], fixed_image_type(3, 3, 3))
    with pytest.raises(SchemaError, match="decode it first"):
        to_numpy(pa.array([b"\x89PNG"]))


def test_a_file_reference_reads_lazily_and_copies_only_what_is_remote(tmp_path):
    path = tmp_path / "clip.bin"
    path.write_bytes(b"abc")
    file = File.from_value({"url": str(path), "size": 3})
    assert file == File(str(path), 3)
    assert file.read() == b"abc"
    with file.open() as handle:
        assert handle.read(2) == b"ab"
    with file.to_tempfile() as local:
        assert local.name == str(path)  # a local file is its own copy
    assert File(f"file://{path}").read() == b"abc"
    assert pa.array([{"url": str(path), "size": 3}], FILE).type == FILE


@given(
    st.sampled_from([np.uint8, np.float32, np.int64]),
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.integers(1, 4),
    st.booleans(),
)
def test_any_fixed_shape_tensor_is_held_as_nested_lists_with_its_values(dtype, shape, rows, flip):
    size = int(np.prod(shape))
    permutation = list(reversed(range(len(shape)))) if flip else None  # a transposed layout
    kind = pa.fixed_shape_tensor(pa.from_numpy_dtype(dtype), shape, permutation=permutation)
    flat = pa.array(np.arange(rows * size).astype(dtype))
    tensors = pa.ExtensionArray.from_storage(kind, pa.FixedSizeListArray.from_arrays(flat, size))
    held = from_tensor_extension(tensors)
    assert held.type == tensor_storage(tensors.type)
    logical = tensors.to_numpy_ndarray()  # pyarrow's own reading of the layout
    assert np.array_equal(np.asarray(held.to_pylist(), dtype=dtype), logical)
    chunked = from_tensor_extension(pa.chunked_array([tensors, tensors]))
    assert chunked.num_chunks == 2 and chunked.type == held.type
