"""prompt, Daft: ``daft.functions.prompt`` with an ``OpenAIProvider`` pointed at the local
server (chat completions), ``concurrency=--in-flight`` coroutines -> write_parquet
(id, response)."""

from __future__ import annotations

import argparse

import benchlib


def main(args: argparse.Namespace) -> dict[str, object]:
    import daft
    from daft.ai.openai.provider import OpenAIProvider
    from daft.functions.ai import prompt

    provider = OpenAIProvider(base_url=args.base_url, api_key=benchlib.API_KEY)
    with benchlib.Stopwatch() as watch:
        df = daft.read_parquet(args.data)
        answer = prompt(
            df["text"],
            provider=provider,
            model=benchlib.MODEL,
            use_chat_completions=True,  # the server speaks chat completions, not Responses
            concurrency=args.in_flight,  # for an async method: coroutines at once
        )
        df.select(df["id"], answer.alias("response")).write_parquet(args.out)
    return {"rows": args.rows, "seconds": watch.seconds, "daft": daft.__version__}


if __name__ == "__main__":
    args = benchlib.prompt_parser(__doc__).parse_args()
    benchlib.run("prompt", "daft", lambda: main(args))
