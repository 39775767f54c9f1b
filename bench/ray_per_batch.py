"""What a batch costs on Ray beyond the function's own time: vane's Ray runner against Ray Data.

Run:  .venv/bin/python bench/ray_per_batch.py [--calls 1 2 4] [--repetitions 3]

Both engines run the same callable class over batches of 64 rows on one actor of a local
cluster (``ray.init(num_cpus=2)``, one per run, in a fresh process): the function sleeps 20 ms
and returns its ids, so the engine's work is all that is left. Each engine runs 100 and 700
batches; the difference divided by 600 is the marginal time of one batch, and that minus the
20 ms sleep is the engine's overhead per batch, with start-up (cluster, actors, the model's
load in a real job) taken out. On a GPU, where a batch can take 10-50 ms, this overhead is the
share of the device left idle.

``--calls`` runs vane with other numbers of calls per actor (``PLAIN_CALLS_PER_ACTOR`` in
``vane/execution/ray/lowering.py``; the default is what vane uses). Ray Data is vane's own
dependency for the Ray runner, so both run in vane's venv. Runs alternate between the engines.
Prints one line per run and a summary; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SLEEP_S = 0.02
ROWS_PER_BATCH = 64
SMALL, LARGE = 100, 700


class Sleeper:
    def __call__(self, batch):  # type: ignore[no-untyped-def]
        import pyarrow as pa

        time.sleep(SLEEP_S)
        return pa.table({"id": batch["id"]})


def one_run(engine: str, batches: int, calls: int | None) -> float:
    """Seconds for ``batches`` batches, in this process (called in a fresh one by ``main``)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = batches * ROWS_PER_BATCH
    started = time.perf_counter()
    if engine == "ray-data":
        n = (
            ray.data.range(rows)
            .map_batches(Sleeper, batch_size=ROWS_PER_BATCH, batch_format="pyarrow", concurrency=1)
            .count()
        )
    else:
        import vane
        from vane.execution.ray import lowering

        if calls is not None:
            lowering.PLAIN_CALLS_PER_ACTOR = calls
        vane.configure(runner="ray", progress=False)
        n = (
            vane.range(rows)
            .map_batches(Sleeper, schema={"id": "BIGINT"}, batch_size=ROWS_PER_BATCH)
            .count()
        )
    seconds = time.perf_counter() - started
    assert n == rows, (n, rows)
    ray.shutdown()
    return seconds


def label(engine: str, calls: int | None) -> str:
    return engine if calls is None else f"{engine} calls={calls}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, nargs="*", default=[], help="vane calls per actor")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    engines = [("vane", None), *(("vane", c) for c in args.calls), ("ray-data", None)]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    seconds: dict[tuple[str, int | None, int], list[float]] = {}
    for repetition in range(args.repetitions):
        for engine, calls in engines:
            for batches in (SMALL, LARGE):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", json.dumps([engine, batches, calls])],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                s = float(out.stdout.strip().splitlines()[-1])
                seconds.setdefault((engine, calls, batches), []).append(s)
                name = label(engine, calls)
                print(f"#{repetition + 1} {name:18} {batches:4} batches {s:6.2f} s", flush=True)
    print(f"\nmedians; overhead = marginal time of a batch minus its {SLEEP_S * 1000:.0f} ms sleep")
    for engine, calls in engines:
        small = statistics.median(seconds[(engine, calls, SMALL)])
        large = statistics.median(seconds[(engine, calls, LARGE)])
        per_batch = (large - small) / (LARGE - SMALL)
        start = small - SMALL * per_batch
        print(
            f"{label(engine, calls):18} overhead per batch {(per_batch - SLEEP_S) * 1000:5.2f} ms, "
            f"start {start:5.2f} s ({small:.2f} s / {large:.2f} s)"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        engine, batches, calls = json.loads(sys.argv[2])
        print(one_run(engine, batches, calls))
    else:
        main()
