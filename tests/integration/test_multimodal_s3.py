"""Images and files in an object store: moto's S3 server on 127.0.0.1 (reached through
AWS_ENDPOINT_URL, as test_object_stores does), listed by from_glob_path and read_images through
vane's remote path resolution, and read by the image and file functions in the workers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

import vane
from tests.images import pattern, png_bytes
from tests.s3_server import local_s3
from vane import functions as F
from vane.types.images import to_numpy

moto_server = pytest.importorskip("moto.server")
botocore_session = pytest.importorskip("botocore.session")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with local_s3() as url:
        client = botocore_session.get_session().create_client("s3", endpoint_url=url)
        client.create_bucket(Bucket="photos")
        for seed in range(3):
            body = png_bytes(pattern(5 + seed, 7, seed=seed))
            client.put_object(Bucket="photos", Key=f"2026/{seed}.png", Body=body)
        client.put_object(Bucket="photos", Key="2026/notes.txt", Body=b"not an image")
        client.create_bucket(Bucket="audio")
        for name in ("a", "b"):
            client.put_object(Bucket="audio", Key=f"clips/{name}.wav", Body=name.encode() * 5)
        yield url


@pytest.fixture(scope="module")
def bucket(server: str) -> str:
    return "photos"


def test_images_and_files_read_from_s3(bucket):
    listed = vane.from_glob_path(f"s3://{bucket}/2026/").order_by("path").to_pylist()
    assert [r["path"] for r in listed] == [
        f"s3://{bucket}/2026/{name}" for name in ("0.png", "1.png", "2.png", "notes.txt")
    ]
    assert [r["size"] for r in listed[:3]] == [
        len(png_bytes(pattern(5 + s, 7, seed=s))) for s in range(3)
    ]

    images = vane.read_images(f"s3://{bucket}/2026/").order_by("path")  # the .txt is not listed
    decoded = to_numpy(images.to_arrow().column("image"))
    for seed, image in enumerate(decoded):
        assert image is not None and np.array_equal(image, pattern(5 + seed, 7, seed=seed))
    sizes = images.select(F.file_size("path").alias("n"), F.read_bytes("path").alias("b"))
    assert all(r["n"] == len(r["b"]) for r in sizes.to_pylist())


SECRET = "not-for-printing-8c1d"


class Reader:
    """What Daft's transcription example hands a class: a vane.File per row, read where the
    method runs."""

    @vane.method(return_dtype="VARCHAR")
    def read(self, audio: vane.File) -> str:
        assert isinstance(audio, vane.File)
        with audio.to_tempfile() as local:
            copied = os.path.getsize(local)
        return f"{audio.read().decode()}:{copied}:{os.getpid()}"


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_files_in_a_store_open_where_the_udf_runs_with_the_listing_storage_options(
    server, backend, monkeypatch
):
    # The environment points nowhere: only the storage options reach the store.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    options = {"endpoint_url": server, "key": "testing", "secret": SECRET, "max_attempts": 1}
    listed = vane.from_glob_path("s3://audio/clips/*.wav", storage_options=options)
    reader = vane.cls(use_process=backend == "subprocess_actor")(Reader)
    out = listed.select("path", reader().read(F.file("path")).alias("got")).order_by("path")
    rows = out.to_pylist()
    assert [r["got"].rsplit(":", 1)[0] for r in rows] == ["aaaaa:5", "bbbbb:5"]
    in_child = {int(r["got"].rsplit(":", 1)[1]) != os.getpid() for r in rows}
    assert in_child == {backend == "subprocess_actor"}
    assert SECRET not in out.explain()

    missing = vane.from_pydict({"path": ["s3://audio/clips/gone.wav"]})
    with pytest.raises(vane.errors.VaneError) as failure:
        missing.select(reader().read(F.file("path")).alias("got")).to_pylist()
    assert "gone.wav" in str(failure.value) and SECRET not in str(failure.value)


def test_a_column_of_urls_opens_with_the_configured_storage_options(server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    urls = vane.from_pydict({"url": ["s3://audio/clips/b.wav"]})
    vane.configure(storage_options={"s3": {"endpoint_url": server, "secret": SECRET}})
    try:
        reader = vane.cls(use_process=True)(Reader)
        [row] = urls.select(reader().read(F.file("url")).alias("got")).to_pylist()
    finally:
        vane.configure(storage_options={})
    assert row["got"].startswith("bbbbb:5:")


class StoresSeen:
    """The storage options a Ray actor's worker process was sent, by bucket (never values)."""

    @vane.method(return_dtype="VARCHAR")
    def read(self, audio: vane.File) -> str:
        from vane.io import file_stores

        installed = file_stores._installed
        buckets = [name for name, _ in installed.buckets] if installed is not None else []
        return f"{audio.read().decode()}:{','.join(buckets)}"


@pytest.mark.ray
def test_files_in_a_store_open_in_ray_actors_with_the_listing_storage_options(server, on_ray):
    options = {"endpoint_url": server, "key": "testing", "secret": SECRET}
    listed = vane.from_glob_path("s3://audio/clips/a.wav", storage_options=options)
    reader = vane.cls(StoresSeen)  # on the Ray runner: a Ray actor hosting a worker process
    [row] = listed.select(reader().read(F.file("path")).alias("got")).to_pylist()
    content, buckets = row["got"].split(":", 1)
    assert content == "aaaaa" and "s3://audio" in buckets.split(",")
