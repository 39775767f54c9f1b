"""What runs inside the actors for each AI function: built once per actor from a provider's
descriptor, then called on batches of the argument columns (as any ``@vane.cls`` batch method).

A row whose input is null gets a null answer and costs no request. Each row's value is sent as
text (``inputs.py``); a value that has none (binary that is not UTF-8) fails its row unsent. A
prompt answers each row on its own: a request that still fails after the provider's retries, or
a reply that is no answer (no text, a refusal, an answer that does not fit ``return_format``),
fails that row only (``RowResults``), never its neighbours.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from vane.ai.inputs import texts
from vane.ai.protocols import Answer, PromptRequest, RequestRefused, Usage
from vane.ai.structured import OutputFormat, read_answer
from vane.errors import ConfigurationError, ProviderError
from vane.types.files import File
from vane.types.images import is_image_type, to_numpy
from vane.udf.column_calls import RowResults

_CONVERSIONS = (None, "r", "s", "a")


@dataclass(frozen=True)
class Template:
    """A prompt with ``{column}`` placeholders (``str.format`` syntax), checked when the plan is
    built. A placeholder is filled with its column's text (``inputs.py``); one with a format
    spec or a conversion (``{price:.2f}``, ``{name!r}``) formats the column's Python value with
    it, as ``str.format`` would."""

    text: str
    # (literal text, placeholder or None, format spec, conversion), as string.Formatter parses
    pieces: tuple[tuple[str, str | None, str, str | None], ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise ConfigurationError(
                f"prompt(): template {text!r} is not a valid format string ({exc}); "
                "placeholders are {column}, and a literal brace is written {{ or }}"
            ) from None
        pieces = []
        for literal, name, spec, conversion in parsed:
            if name is not None:
                _check_placeholder(text, name, spec or "", conversion)
            pieces.append((literal, name, spec or "", conversion))
        template = cls(text, tuple(pieces))
        if not template.fields:
            raise ConfigurationError(
                f"prompt(): template {text!r} names no column; write placeholders such as "
                "{text} for the columns to fill in"
            )
        return template

    @property
    def fields(self) -> list[str]:
        """The placeholders, in order, once each."""
        return list(dict.fromkeys(name for _, name, _, _ in self.pieces if name is not None))

    @property
    def formatting(self) -> set[str]:
        """The placeholders that format their column's Python value (a spec or conversion)."""
        return {name for _, name, spec, conv in self.pieces if name and (spec or conv)}

    def fill(self, texts: Mapping[str, str | None], values: Mapping[str, Any]) -> str:
        """The prompt for one row, from its columns' ``texts`` (and Python ``values``, for
        placeholders that format them); ``ValueError`` when a format spec does not apply."""
        out = []
        formatter = string.Formatter()
        for literal, name, spec, conversion in self.pieces:
            out.append(literal)
            if name is None:
                continue
            if not spec and conversion is None:
                out.append(texts[name] or "")
                continue
            try:
                value = formatter.convert_field(values[name], conversion)
                out.append(format(value, spec))
            except (ValueError, TypeError) as exc:
                shown = "{" + name + (f"!{conversion}" if conversion else "") + f":{spec}}}"
                raise ValueError(
                    f"template placeholder {shown} cannot format {values[name]!r}: {exc}"
                ) from None
        return "".join(out)


def _check_placeholder(template: str, name: str, spec: str, conversion: str | None) -> None:
    where = f"prompt(): template {template!r}"
    if not name or name.isdigit():
        raise ConfigurationError(
            f"{where}: placeholder {{{name}}} is positional; placeholders name columns, as {{text}}"
        )
    if not name.isidentifier():
        raise ConfigurationError(
            f"{where}: placeholder {{{name}}} is not a column name; placeholders name columns, "
            "as {text} (build any other text in a column first)"
        )
    if "{" in spec:
        raise ConfigurationError(
            f"{where}: placeholder {{{name}:{spec}}} has a placeholder inside its format spec; "
            "write the spec out"
        )
    if conversion not in _CONVERSIONS:
        raise ConfigurationError(
            f"{where}: placeholder {{{name}!{conversion}}} has an unknown conversion; use !r, "
            "!s or !a"
        )


def prompts_of(
    template: Template | None, columns: Sequence[pa.Array]
) -> tuple[list[str | None], list[str | None]]:
    """Each row's prompt (None for a row with a null) and why a row has none: the argument
    column's text, or the template filled from its columns."""
    rendered = [texts(c) for c in columns]
    if template is None:
        return rendered[0]
    names = template.fields
    formatting = template.formatting  # only these need Python values
    values = [c.to_pylist() if n in formatting else [] for n, c in zip(names, columns, strict=True)]
    prompts: list[str | None] = []
    errors: list[str | None] = []
    for row in range(len(columns[0])):
        failed = next((e[row] for _, e in rendered if e[row] is not None), None)
        if failed is not None or any(t[row] is None for t, _ in rendered):
            prompts.append(None)
            errors.append(failed)
            continue
        try:
            prompt = template.fill(
                {n: t[row] for n, (t, _) in zip(names, rendered, strict=True)},
                {n: v[row] for n, v in zip(names, values, strict=True) if n in formatting},
            )
        except ValueError as exc:
            prompts.append(None)
            errors.append(str(exc))
            continue
        prompts.append(prompt)
        errors.append(None)
    return prompts, errors


class PromptRunner:
    """``prompt``: one request per row, answered concurrently by the provider."""

    def __init__(
        self,
        descriptor: Any,
        *,
        system: str | None = None,
        template: Template | None = None,
        output: OutputFormat | None = None,
        images: int = 0,
        files: int = 0,
    ) -> None:
        self.prompter = descriptor.instantiate()
        # After the prompt's columns: `images` columns sent as image_url parts, then `files`
        # columns sent as file parts.
        self.images = images
        self.files = files
        self.options = dict(getattr(descriptor, "generation", {}) or {})
        if output is not None:
            self.options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": output.name, "schema": output.schema, "strict": True},
            }
        self.system = system
        self.template = template
        self.output = output
        self.read = functools.partial(read_answer, form=output)
        self.usage = Usage()

    def usage_counters(self) -> dict[str, int]:
        return self.usage.as_dict()

    async def teardown(self) -> None:
        await _close(self.prompter)

    def _prompts(self, columns: Sequence[pa.Array]) -> tuple[list[str | None], list[str | None]]:
        return prompts_of(self.template, columns)

    async def run(self, *columns: pa.Array) -> RowResults:
        texts_end = len(columns) - self.images - self.files
        prompts, errors = self._prompts(columns[:texts_end])
        images_end = texts_end + self.images
        attached = [image_parts(c) for c in columns[texts_end:images_end]]
        attached += [file_parts(c) for c in columns[images_end:]]
        asked = [i for i, p in enumerate(prompts) if p is not None]
        requests = [self._request(str(prompts[i]), _present(a[i] for a in attached)) for i in asked]
        answers = await self.prompter.answer(requests, self.usage, self.read) if requests else []
        values: list[Any] = [None] * len(prompts)
        for position, answer in zip(asked, answers, strict=True):
            values[position], errors[position] = answer.value, answer.error
        self.usage.failures += sum(error is not None for error in errors)
        return RowResults(self._column(values, errors), errors)

    def _request(self, prompt: str, attached: Sequence[Mapping[str, Any]] = ()) -> PromptRequest:
        messages: list[Mapping[str, Any]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        if attached:  # OpenAI's parts: the text, then each image or file
            parts: list[Mapping[str, Any]] = [{"type": "text", "text": prompt}, *attached]
            messages.append({"role": "user", "content": parts})
        else:
            messages.append({"role": "user", "content": prompt})
        return PromptRequest(tuple(messages), self.options)

    def _column(self, values: list[Any], errors: list[str | None]) -> Any:
        """The answers as the column: text as it came; structured answers, each already one
        row of the STRUCT type, put together as they are (never inferred again)."""
        if self.output is None:
            return [None if e is not None else v for v, e in zip(values, errors, strict=True)]
        kind = self.output.arrow_type
        empty = pa.nulls(1, kind)
        pairs = zip(values, errors, strict=True)
        rows = [empty if e is not None or v is None else v for v, e in pairs]
        return pa.concat_arrays(rows) if rows else pa.array([], kind)


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

    def run(self, column: pa.Array) -> RowResults:
        rendered, errors = texts(column)
        present = [i for i, t in enumerate(rendered) if t is not None]
        if not present:
            return self._results(len(rendered), [], [], errors)
        vectors = self.embedder.embed_text([rendered[i] for i in present], self.usage)
        matrix = np.asarray(vectors, dtype=np.float32)
        if len(matrix) != len(present):
            raise ValueError(f"the model returned {len(matrix)} vectors for {len(present)} texts")
        return self._results(len(rendered), present, list(matrix), errors)

    def _results(
        self, rows: int, present: list[int], vectors: list[Any], errors: list[str | None]
    ) -> RowResults:
        """Vectors (None where a row failed) put back at their rows, nulls elsewhere."""
        values: list[Any] = [None] * rows
        for position, vector in zip(present, vectors, strict=True):
            if vector is not None:
                values[position] = _normalized(vector) if self.normalize else vector
        self.usage.failures += sum(error is not None for error in errors)
        return RowResults(values, errors)


class RemoteEmbedTextRunner(EmbedTextRunner):
    """``embed_text`` against a server: the batch is one request. A reply that holds no vector
    for a text fails that text's row; a request that fails after the provider's retries, or
    whose reply is unreadable, fails the rows it carried, and sends none of them again. Only a
    request the server refused for what it holds (HTTP 400, 413, 422: a text too long, say)
    fails the batch, so that ``on_error`` "null" or "skip" can split it to find that text."""

    async def run(self, column: pa.Array) -> RowResults:  # type: ignore[override]
        rendered, errors = texts(column)
        present = [i for i, t in enumerate(rendered) if t is not None]
        answers: list[Answer] = []
        if present:
            try:
                answers = await self.embedder.embed([rendered[i] for i in present], self.usage)
            except RequestRefused:
                if len(present) == 1:  # the text to blame, found: the batch fails as its row
                    self.usage.failures += 1
                raise
            except ProviderError as exc:
                answers = [Answer(error=str(exc))] * len(present)
        vectors = []
        for position, answer in zip(present, answers, strict=True):
            errors[position] = answer.error
            vectors.append(None if answer.error else np.asarray(answer.value, dtype=np.float32))
        return self._results(len(rendered), present, vectors, errors)


class EmbedImageRunner(EmbedTextRunner):
    """``embed_image``: bytes of an image, or a path to one, per row."""

    def run(self, images: pa.Array) -> RowResults:
        values = image_inputs(images)
        present = [i for i, v in enumerate(values) if v is not None]
        if not present:
            return self._results(len(values), [], [], [None] * len(values))
        vectors = self.embedder.embed_image([values[i] for i in present], self.usage)
        matrix = np.asarray(vectors, dtype=np.float32)
        if len(matrix) != len(present):
            raise ValueError(f"the model returned {len(matrix)} vectors for {len(present)} images")
        return self._results(len(values), present, list(matrix), [None] * len(values))


class RemoteEmbedImageRunner(EmbedTextRunner):
    """``embed_image`` against a server: each image a request of its own (``http(s)`` URLs as
    they are, anything else as a ``data:`` URI read here, as ``prompt`` sends images), sent
    concurrently; a request that fails after the provider's retries fails its row only."""

    async def run(self, images: pa.Array) -> RowResults:  # type: ignore[override]
        urls = image_urls(images)
        present = [i for i, url in enumerate(urls) if url is not None]
        errors: list[str | None] = [None] * len(urls)
        answers: list[Answer] = []
        if present:
            answers = await self.embedder.embed_images([urls[i] for i in present], self.usage)
        vectors = []
        for position, answer in zip(present, answers, strict=True):
            errors[position] = answer.error
            vectors.append(None if answer.error else np.asarray(answer.value, dtype=np.float32))
        return self._results(len(urls), present, vectors, errors)


def _image_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    file = File.from_value(value)
    assert file is not None
    return file.read()


def image_inputs(column: pa.Array) -> list[bytes | None]:
    """Each row's image as encoded bytes, what the models' processors and the servers take:
    bytes as they are, paths and file references read here (in the worker), decoded pixels
    encoded as PNG (lossless)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not is_image_type(column.type):
        return [None if v is None else _image_bytes(v) for v in column.to_pylist()]
    import io

    from PIL import Image

    out: list[bytes | None] = []
    for pixels in to_numpy(column):
        if pixels is None:
            out.append(None)
            continue
        buffer = io.BytesIO()
        Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels).save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def _normalized(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector if norm == 0 else (vector / norm).astype(np.float32)


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

    def run(self, column: pa.Array) -> RowResults:
        rendered, errors = texts(column)
        present = [i for i, t in enumerate(rendered) if t is not None]
        out: list[str | None] = [None] * len(rendered)
        if present:
            vectors = np.asarray(
                self.embedder.embed_text([rendered[i] for i in present], self.usage),
                dtype=np.float32,
            )
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            best = np.argmax(vectors @ self._labels.T, axis=1)
            for position, label in zip(present, best, strict=True):
                out[position] = self.labels[int(label)]
        self.usage.failures += sum(error is not None for error in errors)
        return RowResults(out, errors)


_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
)


def _media_type(data: bytes) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _SIGNATURES if data.startswith(magic)), "image/png")


def image_urls(column: pa.Array) -> list[str | None]:
    """Each row's image as a prompt's ``image_url``: an ``http(s)://`` URL as it is (the server
    fetches it), anything else read here and sent as a ``data:`` URI."""
    import base64

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        values: list[str | None] = column.to_pylist()
        if all(v is None or v.lower().startswith(("http://", "https://")) for v in values):
            return values
    out: list[str | None] = []
    for data in image_inputs(column):
        if data is None:
            out.append(None)
        else:
            encoded = base64.b64encode(data).decode("ascii")
            out.append(f"data:{_media_type(data)};base64,{encoded}")
    return out


def _present(parts: Iterable[dict[str, Any] | None]) -> list[Mapping[str, Any]]:
    return [part for part in parts if part is not None]


def image_parts(column: pa.Array) -> list[dict[str, Any] | None]:
    """Each row's image as an OpenAI ``image_url`` part (None for a null)."""
    return [
        None if url is None else {"type": "image_url", "image_url": {"url": url}}
        for url in image_urls(column)
    ]


def file_parts(column: pa.Array) -> list[dict[str, Any] | None]:
    """Each row's file (a path, URL or file reference, read here, in the worker) as an OpenAI
    ``file`` part: its name and its bytes as a ``data:`` URI of its media type (a PDF, a text
    file), as Daft's prompt sends documents."""
    import base64
    import mimetypes

    out: list[dict[str, Any] | None] = []
    for value in column.to_pylist():
        file = None if value is None else File.from_value(value)
        if file is None:
            out.append(None)
            continue
        name = file.url.rstrip("/").rsplit("/", 1)[-1]
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        data = base64.b64encode(file.read()).decode("ascii")
        out.append(
            {"type": "file", "file": {"filename": name, "file_data": f"data:{kind};base64,{data}"}}
        )
    return out


class ClassifyImageRunner:
    """``classify_image`` zero-shot, as CLIP does: the label whose text embedding (through
    ``template``, "a photo of a {}") is most like the image's embedding."""

    def __init__(self, descriptor: Any, labels: Sequence[str], template: str) -> None:
        self.embedder = descriptor.instantiate()
        self.labels = list(labels)
        self.usage = Usage()
        prompts = [template.format(label) for label in self.labels]
        matrix = np.asarray(self.embedder.embed_text(prompts, self.usage), dtype=np.float32)
        self._labels = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def usage_counters(self) -> dict[str, int]:
        return self.usage.as_dict()

    def run(self, images: pa.Array) -> list[str | None]:
        values = image_inputs(images)
        present = [i for i, v in enumerate(values) if v is not None]
        out: list[str | None] = [None] * len(values)
        if present:
            vectors = np.asarray(
                self.embedder.embed_image([values[i] for i in present], self.usage),
                dtype=np.float32,
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
