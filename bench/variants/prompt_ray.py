"""prompt, Ray Data: map_batches with an async callable class (one actor, concurrency=1) that
answers each batch's rows with AsyncOpenAI, --in-flight requests at once across the batches the
actor runs concurrently -> write_parquet (id, response)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import benchlib


class Asker:
    def __init__(self, base_url: str, in_flight: int) -> None:
        import openai

        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=benchlib.API_KEY)
        self.slots = asyncio.Semaphore(in_flight)  # shared by every batch on this actor

    async def ask(self, text: str) -> str:
        async with self.slots:
            reply = await self.client.chat.completions.create(**benchlib.chat_body(text))
        return reply.choices[0].message.content or ""

    async def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        answers = await asyncio.gather(*(self.ask(t) for t in batch["text"].to_pylist()))
        return pa.table({"id": batch["id"], "response": pa.array(answers, pa.string())})


def main(args: argparse.Namespace) -> dict[str, object]:
    import ray

    startup = benchlib.start_ray()
    with benchlib.Stopwatch() as watch:
        ray.data.read_parquet(args.data).map_batches(
            Asker,
            fn_constructor_args=(args.base_url, args.in_flight),
            batch_size=args.batch_size,
            batch_format="pyarrow",
            concurrency=1,
        ).write_parquet(args.out)
    ray.shutdown()
    return {"rows": args.rows, "seconds": watch.seconds, "startup_s": startup}


if __name__ == "__main__":
    parser = benchlib.prompt_parser(__doc__)
    parser.set_defaults(batch_size=256)
    args = parser.parse_args()
    benchlib.run("prompt", "ray-data", lambda: main(args))
