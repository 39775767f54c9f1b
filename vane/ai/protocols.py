"""What a provider offers, and what runs on the worker.

A provider turns a model name and options into a small picklable *descriptor* in the driver
(checking what it can there: the model name, the options, that its package is installed).
The descriptor travels to each actor, where ``instantiate()`` builds the real thing once: an
HTTP client, a loaded model. AI functions are column UDFs over these, so batching, actors,
backends, retries and progress have one implementation.

Worker-side objects answer a batch at a time. A prompter answers each row on its own: one
failing request, or a reply that is no answer (no text, a refusal, text that does not fit
``return_format``), gives that row an ``Answer`` with an error and leaves its neighbours alone.
What counts as an answer is the caller's ``read``: a prompter applies it to each model output
before keeping it anywhere (a cache keeps only what ``read`` accepted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from vane.errors import ProviderError


@dataclass
class Usage:
    """What a step's requests cost and did, summed over its batches."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    cache_hits: int = 0
    failures: int = 0
    # Requests answered through a provider batch (mode="batch"), and their tokens: counted in
    # prompt_tokens and completion_tokens too, and priced at half (see ``Budget``).
    batch_requests: int = 0
    batch_prompt_tokens: int = 0
    batch_completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class Answer:
    """One row's answer: ``value`` (what ``read`` made of the model's output), or ``error``."""

    value: Any = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class RequestRefused(ProviderError):
    """The provider refused a request for what it holds (HTTP 400, 413, 422): one of the
    inputs it carried may be to blame, so a request of several rows is worth splitting."""


class NotFound(ProviderError):
    """The server has no such thing (HTTP 404): a batch or a file it no longer keeps."""


# A model's raw output -> the row's value, or ``ValueError`` saying why it is no answer.
Read = Callable[[Any], Any]


def answered(output: Any, read: Read, prompt_tokens: int = 0, completion_tokens: int = 0) -> Answer:
    """The ``Answer`` for a model's raw ``output``: ``read``'s value, or its reason as the
    row's error."""
    try:
        return Answer(read(output), None, prompt_tokens, completion_tokens)
    except ValueError as exc:
        return Answer(None, str(exc), prompt_tokens, completion_tokens)


@dataclass(frozen=True)
class PromptRequest:
    """Everything that decides an answer (the cache key is built from it)."""

    messages: tuple[Mapping[str, Any], ...]
    options: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Prompter(Protocol):
    async def answer(
        self, requests: Sequence[PromptRequest], usage: Usage, read: Read
    ) -> list[Answer]: ...

    def close(self) -> None: ...


@runtime_checkable
class TextEmbedder(Protocol):
    def embed_text(self, texts: Sequence[str], usage: Usage) -> Sequence[Sequence[float]]: ...


@runtime_checkable
class ImageEmbedder(Protocol):
    def embed_image(self, images: Sequence[bytes], usage: Usage) -> Sequence[Sequence[float]]: ...


class Descriptor(Protocol):
    """Picklable; built in the driver, instantiated once per actor."""

    provider: str
    model: str

    def instantiate(self) -> Any: ...

    def resources(self) -> Mapping[str, Any]:
        """UDF settings the provider needs (``gpus`` for a local model, say)."""
        ...
