"""images, vane: read_images(size=(224, 224)) decodes and resizes in a UDF step (Pillow, in
batches, in the workers), then map_batches hands (n, 224, 224, 3) numpy batches to a ResNet-18
class constructed once per actor, and (path, label) is written to Parquet. ``--backend`` is the
model step's (thread or subprocess_actor); decoding runs on the thread backend, alongside."""

from __future__ import annotations

import argparse
from typing import Any

import benchlib


class Classifier:
    def __init__(self) -> None:
        self.model = benchlib.load_classifier()

    def __call__(self, batch: dict[str, Any]) -> Any:
        return benchlib.labels_table(batch["path"], benchlib.classify(self.model, batch["image"]))


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane()
    vane.configure(progress=False)
    size = (benchlib.IMAGE_SIZE, benchlib.IMAGE_SIZE)
    with benchlib.Stopwatch() as watch:
        result = (
            vane.read_images(args.data, size=size)
            .map_batches(
                Classifier,
                schema={"path": "VARCHAR", "label": "BIGINT"},
                batch_size=args.batch_size,
                batch_format="numpy",
                execution_backend=args.backend,
            )
            .write_parquet(args.out + "/")
        )
    # the model's busy fraction, as the hand loop reports its own: its calls' seconds (summed
    # over its actors: one, unless concurrency= says more) over the run's
    (model,) = [s for s in result.steps if s.step.startswith("Classifier")]
    return {
        "rows": result.rows,
        "seconds": watch.seconds,
        "model_busy": model.busy_seconds / watch.seconds,
    }


if __name__ == "__main__":
    parser = benchlib.image_parser(__doc__)
    parser.add_argument("--backend", default="thread", choices=["thread", "subprocess_actor"])
    args = parser.parse_args()
    benchlib.run("images", f"vane-{args.backend}", lambda: main(args))
