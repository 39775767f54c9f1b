"""Images and files from a folder to a model's input: read_images and from_glob_path, the image
and file functions as lifted steps in the workers, numpy batches of (n, h, w, c), and both
column types through Parquet and the thread and subprocess backends."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import vane
from tests.images import RED, pattern, png_bytes, write_photos
from vane import col
from vane import functions as F
from vane.errors import SourceNotFoundError, UDFError
from vane.functions import _images
from vane.types.images import IMAGE, fixed_image_type, from_numpy, to_numpy

GOOD = ["png", "jpeg", "grey", "cmyk", "rotated"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def good(photos: dict[str, Path]) -> list[str]:
    return sorted(str(photos[kind]) for kind in GOOD)


def _by_path(rows: list[dict]) -> dict[str, dict]:
    return {os.path.basename(r["path"]): r for r in rows}


def test_from_glob_path_lists_each_file_with_its_size_and_time(photos):
    folder = photos["png"].parent
    rows = vane.from_glob_path(str(folder / "*.jpg")).to_pylist()
    assert [os.path.basename(r["path"]) for r in rows] == [
        "b_wide.jpg",
        "d_cmyk.jpg",
        "e_rotated.jpg",
        "f_corrupt.jpg",
    ]
    for row in rows:
        info = os.stat(row["path"])
        assert row["size"] == info.st_size
        assert abs(row["modification_time"].timestamp() - info.st_mtime) < 1e-3
    assert vane.from_glob_path(str(folder)).count() == len(photos)
    with pytest.raises(SourceNotFoundError, match="holds no files"):
        vane.from_glob_path(str(folder / "*.mp3"))


def test_read_images_decodes_upright_in_one_mode_with_their_own_sizes(good, photos):
    rows = _by_path(vane.read_images(good).to_pylist())
    shapes = {name: (r["image"]["height"], r["image"]["width"]) for name, r in rows.items()}
    assert shapes == {
        "a_small.png": (6, 9),
        "b_wide.jpg": (16, 32),
        "c_grey.png": (4, 5),
        "d_cmyk.jpg": (8, 8),
        "e_rotated.jpg": (40, 20),  # EXIF orientation applied
    }
    images = dict(
        zip(
            [os.path.basename(p) for p in good],
            to_numpy(vane.read_images(good).to_arrow().column("image")),
            strict=True,
        )
    )
    assert all(i is not None and i.shape[2] == 3 for i in images.values())
    assert np.array_equal(images["a_small.png"], pattern(6, 9, seed=1))  # PNG is exact
    assert np.abs(images["d_cmyk.jpg"].astype(int) - RED).max() < 8  # CMYK red reads as red
    rotated = images["e_rotated.jpg"].astype(int)
    assert np.abs(rotated[5, 10] - RED).max() < 16  # red half on top once upright
    assert np.abs(rotated[35, 10] - (0, 0, 255)).max() < 16
    grey = vane.read_images(str(photos["grey"]), mode=None).to_pylist()[0]["image"]
    assert grey["channels"] == 1 and grey["data"] == bytes(range(20))


def test_read_images_with_a_size_hands_numpy_batches_of_n_h_w_c(good):
    rel = vane.read_images(good, size=(12, 10), include_paths=False)
    assert rel.columns == ["image"]
    assert rel.schema.field("image").type == fixed_image_type(12, 10, 3)

    def shapes(batch: dict[str, np.ndarray]) -> dict[str, list]:
        images = batch["image"]
        assert isinstance(images, np.ndarray) and images.dtype == np.uint8
        return {"shape": [list(images.shape)] * len(images), "mean": images.mean(axis=(1, 2, 3))}

    out = rel.map_batches(
        shapes, batch_format="numpy", batch_size=2, schema={"shape": "BIGINT[]", "mean": "DOUBLE"}
    ).to_pylist()
    assert len(out) == len(good)
    assert {tuple(r["shape"][1:]) for r in out} == {(12, 10, 3)}
    assert all(r["shape"][0] <= 2 for r in out)


def test_images_of_any_shape_reach_numpy_batches_as_their_pixels(good):
    def shapes(batch: dict[str, np.ndarray]) -> dict[str, list]:
        images = batch["image"]
        assert images.dtype == object and all(isinstance(i, np.ndarray) for i in images)
        return {"path": list(batch["path"]), "shape": [list(i.shape) for i in images]}

    out = vane.read_images(good + good[:1]).map_batches(  # two of one shape in a batch too
        shapes, batch_format="numpy", schema={"path": "VARCHAR", "shape": "BIGINT[]"}
    )
    got = {os.path.basename(r["path"]): tuple(r["shape"]) for r in out.to_pylist()}
    assert got["b_wide.jpg"] == (16, 32, 3) and got["e_rotated.jpg"] == (40, 20, 3)


def test_a_corrupt_image_fails_its_row_by_name_or_is_a_null(photos):
    folder = str(photos["png"].parent)
    with pytest.raises(UDFError, match="corrupt or not an image Pillow reads"):
        vane.read_images(folder).to_arrow()
    rel = vane.from_glob_path(folder).with_column(
        "image", F.decode_image("path", on_error="null", error_column="why")
    )
    with pytest.warns(UserWarning, match="kept 1 failing row as nulls"):
        rows = rel.to_pylist()
    failed = [r for r in rows if r["image"] is None]
    assert [os.path.basename(r["path"]) for r in failed] == ["f_corrupt.jpg"]
    assert "corrupt or not an image Pillow reads" in failed[0]["why"]
    assert all(r["why"] is None for r in rows if r["image"] is not None)


@settings(max_examples=8)
@given(st.lists(shapes_ := st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=4))
def test_png_encode_and_decode_are_exact_inverses_in_a_batch(sizes):
    images = [pattern(h, w, seed=i) for i, (h, w) in enumerate(sizes)]
    encoded = pa.array([png_bytes(i) for i in images], pa.binary())
    decoded = _images.decode(encoded, "RGB")
    assert all(np.array_equal(a, b) for a, b in zip(to_numpy(decoded), images, strict=True))
    again = _images.decode(_images.encode(decoded, "PNG", None), None)
    assert to_numpy(again)[0] is not None and again.equals(decoded)


@settings(max_examples=8)
@given(arrays(np.uint8, st.tuples(st.integers(2, 8), st.integers(2, 8), st.just(3))))
def test_crop_convert_and_tensor_agree_with_the_pixels(pixels):
    column = pa.array([png_bytes(pixels)])
    h, w, _ = pixels.shape
    cropped = to_numpy(_images.crop(column, (1, 0, w, h - 1)))[0]
    assert cropped is not None and np.array_equal(cropped, pixels[0 : h - 1, 1:w])
    grey = to_numpy(_images.convert(column, "L"))[0]
    assert grey is not None and grey.shape == (h, w, 1)
    tensor = _images.to_tensor(column, w, h, "RGB", 1 / 255)
    values = np.asarray(tensor.values.values.values.to_numpy()).reshape(h, w, 3)
    assert np.allclose(values, pixels / 255, atol=1e-6)


def test_functions_compose_as_expressions_and_run_as_lifted_steps(good):
    rel = vane.from_pydict({"path": good}).select(
        "path",
        F.file_size("path").alias("bytes"),
        F.image_to_tensor(F.decode_image(F.read_bytes("path")), 4, 3).alias("x"),
        F.encode_image(F.resize_image("path", 5, 5), "JPEG", quality=90).alias("thumb"),
    )
    plan = rel.explain(optimized=True)
    for name in ("read_bytes", "decode_image", "image_to_tensor", "resize_image", "file_size"):
        assert f"Udf {name}(" in plan  # each runs in a step's actors, none in the driver
    assert rel.schema.field("x").type == pa.list_(pa.list_(pa.list_(pa.float32(), 3), 4), 3)
    rows = rel.to_pylist()
    assert [r["bytes"] for r in rows] == [os.path.getsize(p) for p in good]
    assert all(np.asarray(r["x"]).shape == (3, 4, 3) for r in rows)
    thumbs = vane.from_pydict({"t": [r["thumb"] for r in rows]}).select(F.decode_image("t"))
    assert {(i["height"], i["width"]) for i in thumbs.to_pylist() for i in [i["t"]]} == {(5, 5)}


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_image_and_file_columns_round_trip_through_parquet_and_the_backend(good, tmp_path, backend):
    rel = vane.from_pydict({"path": good}).select(
        "path",
        F.decode_image("path", execution_backend=backend).alias("any_shape"),
        F.resize_image("path", 7, 6).alias("one_shape"),
        F.file("path").alias("file"),
    )
    rel.write_parquet(tmp_path / "out")
    back = vane.read_parquet(tmp_path / "out").order_by("path")
    assert back.schema.field("any_shape").type == IMAGE
    assert back.schema.field("one_shape").type == fixed_image_type(6, 7, 3)
    expected = rel.order_by("path").to_arrow()
    got = back.to_arrow()
    for name in ("any_shape", "one_shape"):
        for a, b in zip(to_numpy(got.column(name)), to_numpy(expected.column(name)), strict=True):
            assert a is not None and b is not None and np.array_equal(a, b)

    driver = os.getpid()

    @vane.cls(use_process=backend == "subprocess_actor")
    class Inspect:
        @vane.method(return_dtype="VARCHAR")
        def describe(self, file: vane.File, image) -> str:  # type: ignore[no-untyped-def]
            assert isinstance(file, vane.File)
            with file.to_tempfile() as local:
                size = os.path.getsize(local)
            return f"{size}:{file.size}:{len(file.read())}:{len(image)}:{os.getpid() != driver}"

    described = back.select(Inspect().describe(col("file"), col("one_shape"))).to_pylist()
    for row, path in zip(described, good, strict=True):
        size = os.path.getsize(path)
        in_child = backend == "subprocess_actor"
        assert row["file"] == f"{size}:{size}:{size}:6:{in_child}"


def test_batch_bytes_caps_each_batch_of_images_as_well_as_rows():
    frame = 8 * 8 * 3  # bytes of one image
    pixels = np.arange(10 * frame, dtype=np.uint8).reshape(10, 8, 8, 3)
    column = from_numpy(list(pixels), fixed_image_type(8, 8, 3))
    rel = vane.from_arrow(pa.table({"i": pa.array(range(10), pa.int64()), "image": column}))

    def sizes(batch: dict[str, np.ndarray]) -> dict[str, list[int]]:
        return {"i": list(batch["i"]), "rows": [len(batch["i"])] * len(batch["i"])}

    out = rel.map_batches(
        sizes,
        batch_format="numpy",
        batch_size=4,
        batch_bytes=3 * (frame + 8),  # three rows of an image and an id
        schema={"i": "BIGINT", "rows": "BIGINT"},
    ).to_pylist()
    assert [r["i"] for r in out] == list(range(10))
    assert max(r["rows"] for r in out) == 3  # the bytes, not batch_size=4, decided
    tiny = rel.map_batches(sizes, batch_bytes=1, schema={"i": "BIGINT", "rows": "BIGINT"})
    assert {r["rows"] for r in tiny.to_pylist()} == {1}  # a row past the cap is its own batch


def test_a_udf_returning_arrows_canonical_tensors_keeps_their_shape(tmp_path):
    def frames(batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        pixels = np.arange(n * 2 * 3 * 3, dtype=np.uint8).reshape(n, 2, 3, 3)
        return pa.table(
            {"id": batch["id"], "frame": pa.FixedShapeTensorArray.from_numpy_ndarray(pixels)}
        )

    declared = vane.range(3).map_batches(
        frames, schema={"id": "BIGINT", "frame": "UTINYINT[3][3][2]"}
    )
    inferred = vane.range(3).map_batches(frames)
    assert inferred.schema.field("frame").type == fixed_image_type(2, 3, 3)
    inferred.write_parquet(tmp_path / "frames")
    for rel in (declared, inferred, vane.read_parquet(tmp_path / "frames")):
        images = to_numpy(rel.order_by("id").to_arrow().column("frame"))
        assert [i.shape for i in images if i is not None] == [(2, 3, 3)] * 3
        assert images[2] is not None and images[2][0, 0, 0] == 2 * 18


@pytest.mark.ray
def test_images_and_files_on_the_ray_runner(good, on_ray):
    rel = vane.read_images(good, size=(5, 4)).with_column("bytes", F.file_size("path"))

    def shapes(batch: dict[str, np.ndarray]) -> dict[str, list]:
        return {
            "path": list(batch["path"]),
            "shape": [list(batch["image"].shape)] * len(batch["path"]),
        }

    out = rel.map_batches(
        shapes, batch_format="numpy", schema={"path": "VARCHAR", "shape": "BIGINT[]"}
    ).to_pylist()
    assert sorted(r["path"] for r in out) == good
    assert {tuple(r["shape"][1:]) for r in out} == {(5, 4, 3)}
    sizes = {r["path"]: r["bytes"] for r in rel.select("path", "bytes").to_pylist()}
    assert sizes == {p: os.path.getsize(p) for p in good}


@pytest.mark.ray
def test_batch_bytes_caps_each_call_on_the_ray_runner(on_ray):
    sizes = [1000, 1000, 1000, 5000, 1000, 1000]  # the 5000-byte row is past the cap
    rel = vane.from_arrow(
        pa.table({"i": pa.array(range(6), pa.int64()), "blob": [b"x" * n for n in sizes]})
    )

    def calls(batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        return pa.table({"i": batch["i"], "rows": pa.array([n] * n, pa.int64())})

    out = rel.map_batches(
        calls,
        batch_size=6,
        batch_bytes=2 * 1000 + 100,  # two 1000-byte rows (and their ids and offsets)
        execution_backend="ray_actor",
        schema={"i": "BIGINT", "rows": "BIGINT"},
    ).to_pylist()
    rows = {r["i"]: r["rows"] for r in out}
    assert sorted(rows) == list(range(6))
    assert rows[3] == 1  # a row larger than batch_bytes is a call of its own
    assert max(rows.values()) == 2  # the bytes, not batch_size=6, decided
