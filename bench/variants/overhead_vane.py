"""overhead, vane: read_parquet -> map_batches(UDF) -> write_parquet on one backend
(``--backend thread`` or ``subprocess_actor``); with ``--partitions N`` the output is written
partitioned by ``hash(x) % N`` (hive-style directories), for the memory workload; with
``--resume``, with ``resume=True`` (what keeping each batch's answer costs), and with
``--killed-at 0.5`` the rerun of a resumable write killed half-way is timed."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane(resume=bool(benchlib.resume_option(args)))

    vane.configure(progress=False)
    benchlib.warm_overhead_udf()
    record: dict[str, object] = benchlib.kill_at(args) if args.killed_at else {}
    resume = benchlib.resume_option(args)
    with benchlib.Stopwatch() as watch:
        mapped = vane.read_parquet(args.data).map_batches(
            benchlib.overhead_udf,
            schema={"x": "BIGINT", "n": "BIGINT"},
            batch_size=args.batch_size,
            execution_backend=args.backend,
        )
        if args.partitions:
            mapped = mapped.with_column("part", vane.sql_expr(f"hash(x) % {args.partitions}"))
            result = mapped.write_parquet(args.out + "/", partition_by="part", resume=resume)
        else:
            result = mapped.write_parquet(args.out + "/", resume=resume)
    return {"rows": result.rows, "seconds": watch.seconds, **record}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    parser.add_argument("--backend", required=True, choices=["thread", "subprocess_actor"])
    parser.add_argument(
        "--partitions", type=int, default=0, help="write partitioned by hash(x) % N"
    )
    benchlib.resume_arguments(parser)
    args = parser.parse_args()
    benchlib.run("overhead", f"vane-{args.backend}", lambda: main(args))
