"""prompt, vane: read_parquet -> rel.prompt(provider="openai", base_url=...,
max_concurrent_requests=--in-flight) -> write_parquet (id, response)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane()

    vane.configure(progress=False)
    with benchlib.Stopwatch() as watch:
        result = (
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
            .write_parquet(args.out + "/")
        )
    return {"rows": result.rows, "seconds": watch.seconds, "in_flight": args.in_flight}


if __name__ == "__main__":
    args = benchlib.prompt_parser(__doc__).parse_args()
    benchlib.run("prompt", "vane", lambda: main(args))
