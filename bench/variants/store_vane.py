"""object store, vane: read_parquet("s3://...") -> map_batches(the overhead UDF) ->
write_parquet("s3://...") against the local S3 server (AWS_ENDPOINT_URL), on one backend
(``--local-out``: write_parquet(--out), for the large-object memory workload; ``--lance``:
write_lance("s3://....lance"), for the store_lance workload)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane(remote=True, lance=args.lance)
    vane.configure(progress=False)
    source, target = benchlib.store_urls(args)
    benchlib.warm_overhead_udf()
    if args.lance:
        target = benchlib.lance_target(args)
    with benchlib.Stopwatch() as watch:
        mapped = vane.read_parquet(source).map_batches(
            benchlib.overhead_udf,
            schema={"x": "BIGINT", "n": "BIGINT"},
            batch_size=args.batch_size,
            execution_backend=args.backend,
        )
        if args.lance:
            result = mapped.write_lance(target)
        else:
            result = mapped.write_parquet(args.out if args.local_out else target)
    if args.local_out:  # the driver counts what it wrote
        return {"rows": result.rows, "seconds": watch.seconds}
    rows = benchlib.checked_store_rows(target, args.rows)
    assert result.rows == rows
    return {"rows": rows, "seconds": watch.seconds}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    parser.add_argument("--backend", required=True, choices=["thread", "subprocess_actor"])
    parser.add_argument("--local-out", action="store_true", help="write to --out, not the store")
    benchlib.lance_argument(parser)
    args = parser.parse_args()
    benchlib.run(benchlib.store_workload(args), f"vane-{args.backend}", lambda: main(args))
