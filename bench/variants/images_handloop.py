"""images, a hand-written loop: list the folder, then per batch of files decode and resize each
to 224x224 with Pillow, classify the batch with ResNet-18, and write (path, label). Nothing
overlaps: the loop is the floor the engines should pipeline past, and the throughput bound of
the model alone."""

from __future__ import annotations

import argparse
import os
import time

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(args.out)
    model_seconds = 0.0
    with benchlib.Stopwatch() as watch:
        model = benchlib.load_classifier()
        paths = sorted(os.path.join(args.data, f) for f in os.listdir(args.data))
        writer = None
        for start in range(0, len(paths), args.batch_size):
            chunk = paths[start : start + args.batch_size]
            pixels = np.stack([benchlib.decode_resized(p) for p in chunk])
            started = time.perf_counter()
            classes = benchlib.classify(model, pixels)
            model_seconds += time.perf_counter() - started
            table = benchlib.labels_table(pa.array(chunk), classes)
            if writer is None:
                writer = pq.ParquetWriter(os.path.join(args.out, "part-0.parquet"), table.schema)
            writer.write_table(table)
        if writer is not None:
            writer.close()
    return {
        "rows": len(paths),
        "seconds": watch.seconds,
        "model_busy": model_seconds / watch.seconds,
    }


if __name__ == "__main__":
    args = benchlib.image_parser(__doc__).parse_args()
    benchlib.run("images", "hand-loop", lambda: main(args))
