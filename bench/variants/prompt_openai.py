"""prompt, the official openai SDK: AsyncOpenAI with a semaphore of --in-flight requests, one
chat completion per row."""

from __future__ import annotations

import argparse
import asyncio

import benchlib


async def answer_all(base_url: str, texts: list[str], in_flight: int) -> list[str]:
    import openai

    slots = asyncio.Semaphore(in_flight)
    client = openai.AsyncOpenAI(base_url=base_url, api_key=benchlib.API_KEY)

    async def ask(text: str) -> str:
        async with slots:
            reply = await client.chat.completions.create(**benchlib.chat_body(text))
        return reply.choices[0].message.content or ""

    try:
        return await asyncio.gather(*(ask(text) for text in texts))
    finally:
        await client.close()


def main(args: argparse.Namespace) -> dict[str, object]:
    import openai
    import pyarrow.parquet as pq

    with benchlib.Stopwatch() as watch:
        table = pq.read_table(args.data)
        texts = table["text"].to_pylist()
        answers = asyncio.run(answer_all(args.base_url, texts, args.in_flight))
        rows = benchlib.write_answers(args.out, table["id"], answers)
    return {"rows": rows, "seconds": watch.seconds, "openai": openai.__version__}


if __name__ == "__main__":
    args = benchlib.prompt_parser(__doc__).parse_args()
    benchlib.run("prompt", "openai-sdk-loop", lambda: main(args))
