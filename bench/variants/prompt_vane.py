"""prompt, vane: read_parquet -> rel.prompt(provider="openai", base_url=...,
max_concurrent_requests=--in-flight) -> write_parquet (id, response). ``--first``: the seconds
to the first rows (``iter_batches``: the step's first answered batch) (first_rows)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane()

    vane.configure(progress=False)
    answered = (
        vane.read_parquet(args.data)
        .prompt(
            "text",
            provider="openai",
            model=benchlib.MODEL,
            base_url=args.base_url,
            api_key=benchlib.API_KEY,
            max_concurrent_requests=args.in_flight,
        )
        .select("id", "response")
    )
    if args.first:
        with benchlib.Stopwatch() as watch:
            batches = answered.iter_batches()
            first = next(batches)
        batches.close()  # type: ignore[attr-defined]  # a generator: closing it ends the action
        return {"rows": first.num_rows, "seconds": watch.seconds, "in_flight": args.in_flight}
    with benchlib.Stopwatch() as watch:
        result = answered.write_parquet(args.out + "/")
    return {"rows": result.rows, "seconds": watch.seconds, "in_flight": args.in_flight}


if __name__ == "__main__":
    args = benchlib.prompt_parser(__doc__).parse_args()
    benchlib.run(benchlib.prompt_workload(args), "vane", lambda: main(args))
