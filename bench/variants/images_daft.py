"""images, Daft: from_glob_path -> download -> decode_image(mode="RGB") -> resize(224, 224) ->
a ResNet-18 ``@daft.cls`` (max_concurrency=1: one model) whose ``@daft.method.batch`` classifies
``--batch-size`` images at a time -> write_parquet (path, label). Written against
``daft.functions`` (``download``, ``decode_image``, ``resize``); it runs in the peers' venv."""

from __future__ import annotations

import argparse
from typing import Any

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft
    import numpy as np
    from daft.functions import decode_image, download, resize

    @daft.cls(max_concurrency=1)
    class Classifier:
        def __init__(self) -> None:
            self.model = benchlib.load_classifier()

        @daft.method.batch(return_dtype=daft.DataType.int64(), batch_size=args.batch_size)
        def __call__(self, images: daft.Series) -> Any:
            return benchlib.classify(self.model, np.stack(images.to_pylist()))

    size = benchlib.IMAGE_SIZE
    with benchlib.Stopwatch() as watch:
        df = daft.from_glob_path(args.data.rstrip("/") + "/*.jpg")
        image = resize(decode_image(download(df["path"]), mode="RGB"), size, size)
        df.select(df["path"], Classifier()(image).alias("label")).write_parquet(args.out)
    return {"rows": args.rows, "seconds": watch.seconds, "daft": daft.__version__}


if __name__ == "__main__":
    args = benchlib.image_parser(__doc__).parse_args()
    benchlib.run("images", "daft", lambda: main(args))
