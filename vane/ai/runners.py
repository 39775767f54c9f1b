"""What runs inside the actors for each AI function: built once per actor from a provider's
descriptor, then called on batches of the argument columns (as any ``@vane.cls`` batch method).

A row whose input is null gets a null answer and costs no request. A prompt answers each row on
its own: a request that still fails after the provider's retries, or an answer that does not fit
``return_format``, fails that row only (``RowResults``), never its neighbours.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from vane.ai.protocols import Answer, PromptRequest, Usage
from vane.ai.structured import OutputFormat
from vane.udf.column_calls import RowResults


def fields_of(template: str) -> list[str]:
    """The placeholders of a ``str.format`` template, in order, once each (Python's own parser
    of format strings)."""
    names: list[str] = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None:
            if not name.isidentifier():
                raise ValueError(f"template placeholder {{{name}}} is not a column name")
            if name not in names:
                names.append(name)
    return names


class PromptRunner:
    """``prompt``: one request per row, answered concurrently by the provider."""

    def __init__(
        self,
        descriptor: Any,
        *,
        system: str | None = None,
        template: str | None = None,
        fields: Sequence[str] = (),
        output: OutputFormat | None = None,
    ) -> None:
        self.prompter = descriptor.instantiate()
        self.options = dict(getattr(descriptor, "generation", {}) or {})
        if output is not None:
            self.options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": output.name, "schema": output.schema, "strict": True},
            }
        self.system = system
        self.template = template
        self.fields = list(fields)
        self.output = output
        self.usage = Usage()

    def usage_counters(self) -> dict[str, int]:
        return self.usage.as_dict()

    async def teardown(self) -> None:
        await _close(self.prompter)

    def _prompt(self, values: Sequence[Any]) -> str | None:
        if any(v is None for v in values):
            return None
        if self.template is None:
            return str(values[0])
        return self.template.format(**dict(zip(self.fields, values, strict=True)))

    async def run(self, *columns: pa.Array) -> RowResults:
        rows = list(zip(*(c.to_pylist() for c in columns), strict=True))
        prompts = [self._prompt(row) for row in rows]
        asked = [i for i, p in enumerate(prompts) if p is not None]
        requests = [self._request(prompts[i]) for i in asked]  # type: ignore[arg-type]
        answers = await self.prompter.answer(requests, self.usage) if requests else []
        values: list[Any] = [None] * len(rows)
        errors: list[str | None] = [None] * len(rows)
        for position, answer in zip(asked, answers, strict=True):
            values[position], errors[position] = self._read(answer)
        return RowResults(values, errors)

    def _request(self, prompt: str) -> PromptRequest:
        messages: list[Mapping[str, Any]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": prompt})
        return PromptRequest(tuple(messages), self.options)

    def _read(self, answer: Answer) -> tuple[Any, str | None]:
        if answer.error is not None:
            return None, answer.error
        if self.output is None or isinstance(answer.value, dict):
            return answer.value, None
        try:
            return self.output.parse(str(answer.value)), None
        except ValueError as exc:
            self.usage.failures += 1
            return None, str(exc)


class EmbedTextRunner:
    """``embed_text`` with a local model: the batch's non-null texts in one call."""

    def __init__(self, descriptor: Any, *, normalize: bool = False) -> None:
        self.embedder = descriptor.instantiate()
        self.normalize = normalize
        self.usage = Usage()

    def usage_counters(self) -> dict[str, int]:
        return self.usage.as_dict()

    async def teardown(self) -> None:
        await _close(self.embedder)

    def _inputs(self, column: pa.Array) -> tuple[int, list[int], list[Any]]:
        """The batch's size, where its non-null values are, and those values."""
        values = column.to_pylist()
        present = [i for i, v in enumerate(values) if v is not None]
        return len(values), present, [values[i] for i in present]

    def run(self, texts: pa.Array) -> list[Any]:
        rows, present, inputs = self._inputs(texts)
        vectors = self.embedder.embed_text(inputs, self.usage)
        return _place(rows, present, vectors, self.normalize)


class RemoteEmbedTextRunner(EmbedTextRunner):
    """``embed_text`` against a server: the batch is one request."""

    async def run(self, texts: pa.Array) -> list[Any]:  # type: ignore[override]
        rows, present, inputs = self._inputs(texts)
        vectors = await self.embedder.embed(inputs, self.usage)
        return _place(rows, present, vectors, self.normalize)


class EmbedImageRunner(EmbedTextRunner):
    """``embed_image``: bytes of an image, or a path to one, per row."""

    def run(self, images: pa.Array) -> list[Any]:
        rows, present, inputs = self._inputs(images)
        vectors = self.embedder.embed_image([_image_bytes(v) for v in inputs], self.usage)
        return _place(rows, present, vectors, self.normalize)


def _image_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    with open(str(value), "rb") as handle:
        return handle.read()


def _place(rows: int, present: list[int], vectors: Any, normalize: bool) -> list[Any]:
    """Vectors for the non-null rows, put back at their rows (nulls elsewhere)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if len(matrix) != len(present):
        raise ValueError(f"the model returned {len(matrix)} vectors for {len(present)} inputs")
    if normalize and len(matrix):
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
    out: list[Any] = [None] * rows
    for position, vector in zip(present, matrix, strict=True):
        out[position] = vector
    return out


class ClassifyByEmbeddingRunner:
    """``classify_text`` zero-shot: the label whose embedding is most like the text's."""

    def __init__(self, descriptor: Any, labels: Sequence[str]) -> None:
        self.embedder = descriptor.instantiate()
        self.labels = list(labels)
        self.usage = Usage()
        matrix = np.asarray(self.embedder.embed_text(self.labels, self.usage), dtype=np.float32)
        self._labels = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def usage_counters(self) -> dict[str, int]:
        return self.usage.as_dict()

    def run(self, texts: pa.Array) -> list[str | None]:
        values = texts.to_pylist()
        present = [i for i, v in enumerate(values) if v is not None]
        out: list[str | None] = [None] * len(values)
        if not present:
            return out
        vectors = np.asarray(
            self.embedder.embed_text([values[i] for i in present], self.usage), dtype=np.float32
        )
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        best = np.argmax(vectors @ self._labels.T, axis=1)
        for position, label in zip(present, best, strict=True):
            out[position] = self.labels[int(label)]
        return out


async def _close(provider: Any) -> None:
    """A provider's own teardown: ``aclose()`` when it has one (a connection pool that lives
    on the actor's event loop), else ``close()``."""
    aclose = getattr(provider, "aclose", None)
    if callable(aclose):
        await aclose()
        return
    close = getattr(provider, "close", None)
    if callable(close):
        close()
