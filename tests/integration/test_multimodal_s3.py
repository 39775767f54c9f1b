"""Images and files in an object store: moto's S3 server on 127.0.0.1 (reached through
AWS_ENDPOINT_URL, as test_object_stores does), listed by from_glob_path and read_images through
vane's remote path resolution, and read by the image and file functions in the workers."""

from __future__ import annotations

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
def bucket() -> Iterator[str]:
    with local_s3() as url:
        client = botocore_session.get_session().create_client("s3", endpoint_url=url)
        client.create_bucket(Bucket="photos")
        for seed in range(3):
            body = png_bytes(pattern(5 + seed, 7, seed=seed))
            client.put_object(Bucket="photos", Key=f"2026/{seed}.png", Body=body)
        client.put_object(Bucket="photos", Key="2026/notes.txt", Body=b"not an image")
        yield "photos"


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
