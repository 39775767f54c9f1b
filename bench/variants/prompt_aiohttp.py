"""prompt, plain asyncio + aiohttp: one session, a semaphore of --in-flight requests, one POST per
row. The practical limit of a Python client on this machine. ``--first``: the seconds to the
first answer, all rows' requests sent as for the whole run (first_rows)."""

from __future__ import annotations

import argparse
import asyncio

import benchlib


async def answer_all(
    base_url: str, texts: list[str], in_flight: int, first: bool = False
) -> list[str]:
    import aiohttp

    slots = asyncio.Semaphore(in_flight)
    url = f"{base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {benchlib.API_KEY}"}
    connector = aiohttp.TCPConnector(limit=in_flight)

    async def ask(session: aiohttp.ClientSession, text: str) -> str:
        async with slots, session.post(url, json=benchlib.chat_body(text)) as response:
            response.raise_for_status()
            body = await response.json()
        return body["choices"][0]["message"]["content"]

    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        if not first:
            return await asyncio.gather(*(ask(session, text) for text in texts))
        tasks = [asyncio.create_task(ask(session, text)) for text in texts]
        answer = await next(asyncio.as_completed(tasks))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return [answer]


def main(args: argparse.Namespace) -> dict[str, object]:
    import pyarrow.parquet as pq

    with benchlib.Stopwatch() as watch:
        table = pq.read_table(args.data)
        texts = table["text"].to_pylist()
        answers = asyncio.run(answer_all(args.base_url, texts, args.in_flight, args.first))
        rows = (
            len(answers) if args.first else benchlib.write_answers(args.out, table["id"], answers)
        )
    return {"rows": rows, "seconds": watch.seconds, "in_flight": args.in_flight}


if __name__ == "__main__":
    args = benchlib.prompt_parser(__doc__).parse_args()
    benchlib.run(benchlib.prompt_workload(args), "aiohttp-loop", lambda: main(args))
