"""Column UDFs the tests run in threads and worker processes: an importable module, so
subprocess actors can load them by reference as well as by value."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pyarrow as pa
import pyarrow.compute as pc

import vane


@vane.cls
class SentimentClassifier:
    """seeds/000's first example, with a rule-based stand-in for the transformers pipeline."""

    def __init__(self) -> None:
        self.positive = {"amazing", "great", "love"}

    def __call__(self, text: str) -> str:
        words = set(text.lower().split())
        return "POSITIVE" if words & self.positive else "NEGATIVE"


@vane.cls(batch_size=16)
class TextEmbedder:
    """seeds/000's batch embedder, with the packaged all-MiniLM-L6-v2 on the CPU."""

    def __init__(self, model_name: str = "sentence-transformers/all-MiniLM-L6-v2") -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(model_name, device="cpu")

    @vane.method.batch(return_dtype="FLOAT[384]")
    def embed(self, texts: pa.Array) -> list:
        embeddings = self.model.encode(texts.to_pylist(), convert_to_numpy=True)
        return [row.tolist() for row in embeddings]


class Verdict(TypedDict):
    label: str
    score: float


@dataclasses.dataclass
class Span:
    start: int
    end: int


@vane.cls
class Analyzer:
    """Struct return types, from a TypedDict, a dataclass and return_dtype."""

    def __call__(self, text: str) -> Verdict:
        return {"label": text[:1], "score": float(len(text))}

    def span(self, text: str) -> Span:
        return Span(0, len(text))  # type: ignore[return-value]  # Arrow reads the fields

    @vane.method(return_dtype="STRUCT(first VARCHAR, n INTEGER)")
    def first_word(self, text: str) -> dict:
        return {"first": text.split(maxsplit=1)[0], "n": len(text.split())}


@vane.cls(use_process=True, max_concurrency=2, batch_size=4)
class CountedInProcess:
    """Leaves one marker file per construction, named by process and object."""

    def __init__(self, directory: str) -> None:
        marker = Path(directory) / f"{os.getpid()}-{id(self)}"
        marker.write_text(str(os.getpid()))

    def __call__(self, value: int) -> int:
        return os.getpid()

    @vane.method.batch(return_dtype="BIGINT")
    def double(self, values: pa.Array) -> pa.Array:
        return pc.multiply(values, 2)


@vane.cls
class AsyncClient:
    """An async row method: rows overlap on the actor's event loop."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()

    async def __call__(self, value: int) -> int:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.02)
        self.in_flight -= 1
        return self.peak


@vane.cls(max_concurrency=(1, 2))
class ScalingAsyncClient:
    """The same, on one to two actors: ``max_concurrency`` counts actors, not rows."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, value: int) -> int:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.02)
        self.in_flight -= 1
        return self.peak


@vane.func
def shout(text: str) -> str:
    return text.upper() + "!"


@vane.func(return_dtype="BIGINT")
def length(text):  # type: ignore[no-untyped-def]
    return len(text)


@vane.func
def scaled(value: int, factor: int = 1, *, offset: int = 0) -> int:
    return value * factor + offset


@vane.func(on_error="null")
def fragile(value: int) -> int:
    if value == 3:
        raise ValueError("three is unlucky")
    return value * 10


@vane.func(on_error="skip")
def fragile_skip(value: int) -> int:
    if value == 3:
        raise ValueError("three is unlucky")
    return value * 10


@vane.func
def says_text_for_two(value: int) -> int:
    return "two" if value == 2 else value  # type: ignore[return-value]


@vane.func.batch(return_dtype="BIGINT")
def one_short(values: pa.Array) -> list:
    return values.to_pylist()[:-1]


@vane.func.batch(return_dtype="DOUBLE")
def ratio(a: pa.Array, b: pa.Array) -> pa.Array:
    return pc.divide(pc.cast(a, pa.float64()), b)


@vane.func
def words(text: str) -> Iterator[str]:
    """A generator: one row per word; a text without words keeps its row, with a null."""
    yield from text.split()


@vane.func(return_dtype="BIGINT", on_error="null")
def countdown(n: int):  # type: ignore[no-untyped-def]
    if n == 3:
        raise ValueError("three is unlucky")
    yield from range(n, 0, -1)


@vane.func(return_dtype="BIGINT", max_concurrency=4)
async def slow_range(n: int):  # type: ignore[no-untyped-def]
    for i in range(n):
        await asyncio.sleep(0.001)
        yield i


class WordAt(TypedDict):
    word: str
    start: int


@vane.func(use_process=True)
def spans(text: str) -> Iterator[WordAt]:
    start = 0
    for word in text.split():
        yield WordAt(word=word, start=text.index(word, start))
        start += len(word)


@vane.func
def yields_text_for_two(value: int) -> Iterator[int]:
    yield value
    if value == 2:
        yield "two"  # type: ignore[misc]


@vane.func(batch_timeout_s=0.5, on_error="null")
async def stalls_on_two(value: int) -> int:
    if value == 2:
        await asyncio.sleep(30)
    return value


@vane.func(on_error="skip", batch_size=10)
def fragile_skip_in_small_batches(value: int) -> int:
    if value == 4003:
        raise ValueError("4003 is unlucky")
    return value * 10


def value_at_gate(value: int, gate: str) -> int:
    """A column UDF's body that waits at the test's gate (``udfs.wait_at_gate``)."""
    from tests.integration.udfs import wait_at_gate

    wait_at_gate(gate)
    return value


class ModelAtGate:
    """A class UDF whose calls wait at the test's gate (``udfs.wait_at_gate``)."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def __call__(self, value: int) -> int:
        return value_at_gate(value, self.gate)


def plus_one(value: int) -> int:
    """Undecorated, so a test can make it a column UDF with the options it needs."""
    return value + 1
