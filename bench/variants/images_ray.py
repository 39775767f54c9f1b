"""images, Ray Data: ray.data.read_images(size=(224, 224), mode="RGB") -> map_batches(a
ResNet-18 callable class, concurrency=1, batch_format="numpy") -> write_parquet, on
``ray.init(num_cpus=2)``: the shape of Ray Data's image classification example."""

from __future__ import annotations

import argparse
from typing import Any

import benchlib


class Classifier:
    def __init__(self) -> None:
        self.model = benchlib.load_classifier()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {"path": batch["path"], "label": benchlib.classify(self.model, batch["image"])}


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    startup = benchlib.start_ray()
    size = (benchlib.IMAGE_SIZE, benchlib.IMAGE_SIZE)
    with benchlib.Stopwatch() as watch:
        ray.data.read_images(args.data, size=size, mode="RGB", include_paths=True).map_batches(
            Classifier, batch_size=args.batch_size, batch_format="numpy", concurrency=1
        ).write_parquet(args.out)
    ray.shutdown()
    return {"rows": args.rows, "seconds": watch.seconds, "startup_s": startup}


if __name__ == "__main__":
    args = benchlib.image_parser(__doc__).parse_args()
    benchlib.run("images", "ray-data", lambda: main(args))
