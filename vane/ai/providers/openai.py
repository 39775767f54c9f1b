"""Any OpenAI-compatible HTTP server: OpenAI, vLLM's and SGLang's servers, LM Studio, Ollama.

``prompt`` uses ``/chat/completions``, ``embed_text`` and ``embed_image`` ``/embeddings`` (images
as vLLM's server takes them: ``Client.embed_images``). The client is aiohttp, not
the official SDK: measured against a loopback server answering in 50 ms with 64 requests in
flight, the SDK's loop reached about a third of a plain aiohttp loop's rate, the limit on a
small machine being the client's CPU. It behaves as the official client does where it matters:
it retries 408, 409, 429, 5xx, connection errors and timeouts with exponential backoff and
jitter (``max_retries``, default 5), honouring ``retry-after-ms`` and ``Retry-After`` (a
header it cannot read is ignored); other errors are final. A reply that is not valid JSON is
treated as a server error and retried. Until the server has answered once, a refused connection
or a host name that does not resolve is final at once: no server is there (not started, a
wrong ``base_url``), and retrying for 15 s would only delay saying so.

A reply is read field by field and trusted in nothing: a reply without a text answer (``content``
null for a refusal or a tool call, not text, no ``choices``) fails its row only, and a ``usage``
that is not a count is taken as not reported. What fails is never cached.

Options: ``base_url`` (else ``OPENAI_BASE_URL``, else OpenAI's), ``api_key`` (else
``OPENAI_API_KEY``), ``max_concurrent_requests`` (64, per actor), ``requests_per_minute``,
``tokens_per_minute``, ``max_retries``, ``timeout`` (seconds per request, 600), ``cache`` (a
directory; see ``cache.py``), ``server`` (a ``vane.ai.serve`` handle instead of ``base_url``:
each actor asks its own node's server, and a request lost with a server that died waits for
its restart and is sent again, a retry that spends none of ``max_retries``); anything else
(``temperature``, ``max_tokens``, ``top_p``, ``seed``, ``stop``, ...) is sent with each
request.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vane.ai.cache import AnswerCache, request_key
from vane.ai.limits import IMAGE_TOKENS
from vane.ai.node_server import ServerRoute
from vane.ai.protocols import (
    Answer,
    PromptRequest,
    Read,
    Usage,
    answered,
)
from vane.ai.providers import openai_replies as replies
from vane.ai.providers.openai_batch import BatchDispatch
from vane.ai.providers.openai_http import ClientSettings, Transport
from vane.ai.registry import require_packages
from vane.errors import ConfigurationError, ProviderError

OPENAI_URL = "https://api.openai.com/v1"
_CLIENT_OPTIONS = {
    "base_url",
    "api_key",
    "max_concurrent_requests",
    "requests_per_minute",
    "tokens_per_minute",
    "max_retries",
    "timeout",
    "cache",
    "server",
    "mode",
    "batch_poll_interval",
    "batch_fallback",
}
MODES = ("live", "batch")
BATCH_FALLBACKS = ("live", "error")


def _server_route(provider: str, server: Any) -> ServerRoute:
    if isinstance(server, ServerRoute):
        return server
    route = getattr(server, "route", None)  # a vane.ai.serve handle; raises when not running
    if not isinstance(route, ServerRoute):
        raise ConfigurationError(
            f"provider {provider!r}: server= takes the handle of vane.ai.serve(...), got {server!r}"
        )
    return route


def _settings(provider: str, model: str | None, options: Mapping[str, Any]) -> ClientSettings:
    require_packages(provider, {"aiohttp": "openai"})
    route = None
    if options.get("server") is not None:
        route = _server_route(provider, options["server"])
        if options.get("base_url"):
            raise ConfigurationError(
                f"provider {provider!r}: pass server= or base_url=, not both (server= sends "
                "each actor's requests to its own node's server)"
            )
        model = model or route.model
        options = {**options, "base_url": route.base_url, "api_key": options.get("api_key")}
    if not model:
        raise ConfigurationError(
            f"provider {provider!r} needs model=, the name the server knows the model by"
        )
    base_url = str(options.get("base_url") or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
    api_key = options.get("api_key") or os.environ.get("OPENAI_API_KEY")
    if api_key is None and base_url.rstrip("/") == OPENAI_URL and route is None:
        raise ConfigurationError(
            "provider 'openai' needs an API key: set OPENAI_API_KEY or pass api_key=; for "
            "another OpenAI-compatible server pass base_url="
        )
    concurrent = options.get("max_concurrent_requests", 64)
    if isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 1:
        raise ConfigurationError(f"max_concurrent_requests must be >= 1, got {concurrent!r}")
    retries = options.get("max_retries", 5)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigurationError(f"max_retries must be an integer >= 0, got {retries!r}")
    from vane.config import get_config

    cache = options.get("cache") or get_config().ai_cache
    mode, interval, fallback = _batch_options(provider, options, route)
    journal = None
    if mode == "batch":
        from vane.io.resume import cache_root

        journal = str(cache) if cache is not None else str(cache_root() / "batches")
    return ClientSettings(
        provider=provider,
        model=model,
        base_url=base_url.rstrip("/"),
        api_key=None if api_key is None else str(api_key),
        max_concurrent_requests=concurrent,
        requests_per_minute=options.get("requests_per_minute"),
        tokens_per_minute=options.get("tokens_per_minute"),
        max_retries=retries,
        timeout=float(options.get("timeout", 600.0)),
        cache=None if cache is None else str(cache),
        route=route,
        mode=mode,
        batch_poll_interval=interval,
        batch_fallback=fallback,
        journal=journal,
    )


def _batch_options(
    provider: str, options: Mapping[str, Any], route: ServerRoute | None
) -> tuple[str, float, str]:
    mode = options.get("mode", "live")
    if mode not in MODES:
        raise ConfigurationError(
            f"provider {provider!r}: mode={mode!r} is not 'live' (a request per row, answered "
            "at once) or 'batch' (the Batch API: answered within 24 hours, at half the price)"
        )
    if mode == "batch" and route is not None:
        raise ConfigurationError(
            f"provider {provider!r}: mode='batch' needs a server with OpenAI's Batch API "
            "(/v1/batches); a server that vane.ai.serve started has none: leave mode out"
        )
    interval = options.get("batch_poll_interval", 30.0)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
        raise ConfigurationError(
            f"batch_poll_interval is the seconds between two looks at a batch, a number >= 0, "
            f"got {interval!r}"
        )
    fallback = options.get("batch_fallback", "live")
    if fallback not in BATCH_FALLBACKS:
        raise ConfigurationError(
            f"batch_fallback={fallback!r} is not 'live' (ask what a batch did not answer as "
            "live requests) or 'error' (fail those rows, for on_error to handle)"
        )
    return mode, float(interval), fallback


@dataclass(frozen=True)
class OpenAIPrompter:
    provider: str
    model: str
    settings: ClientSettings
    generation: Mapping[str, Any] = field(default_factory=dict)

    def instantiate(self) -> Client:
        return Client(self.settings)

    def resources(self) -> Mapping[str, Any]:
        return {}


@dataclass(frozen=True)
class OpenAITextEmbedder:
    provider: str
    model: str
    settings: ClientSettings
    dimensions: int | None = None

    def instantiate(self) -> Client:
        return Client(self.settings, dimensions=self.dimensions)

    def resources(self) -> Mapping[str, Any]:
        return {}


@dataclass(frozen=True)
class OpenAIImageEmbedder:
    """Images to a server's ``/embeddings`` as vLLM's takes them (``Client.embed_images``);
    ``instruction`` is a text part sent with each image (VLM2Vec-style models want one, such
    as "Represent the given image.")."""

    provider: str
    model: str
    settings: ClientSettings
    dimensions: int | None = None
    instruction: str | None = None

    def instantiate(self) -> Client:
        return Client(self.settings, dimensions=self.dimensions, instruction=self.instruction)

    def resources(self) -> Mapping[str, Any]:
        return {}


def prompter(provider: str, model: str | None, options: Mapping[str, Any]) -> OpenAIPrompter:
    settings = _settings(provider, model, options)
    generation = {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
    try:
        json.dumps(generation, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"provider {provider!r}: the options sent with each request must be JSON values "
            f"(numbers, strings, lists, dicts); {exc}"
        ) from None
    return OpenAIPrompter(provider, settings.model, settings, generation)


def text_embedder(
    provider: str, model: str | None, options: Mapping[str, Any]
) -> OpenAITextEmbedder:
    if options.get("mode", "live") != "live":
        raise ConfigurationError(
            f"provider {provider!r}: mode={options['mode']!r} is for prompt(); embeddings are "
            "asked live, a batch of texts per request"
        )
    settings = _settings(provider, model, options)
    return OpenAITextEmbedder(provider, settings.model, settings, options.get("dimensions"))


def image_embedder(
    provider: str, model: str | None, options: Mapping[str, Any]
) -> OpenAIImageEmbedder:
    settings = _settings(provider, model, options)
    instruction = options.get("instruction")
    if instruction is not None and not isinstance(instruction, str):
        raise ConfigurationError(
            f"embed_image(): instruction is the text sent with each image, got {instruction!r}"
        )
    return OpenAIImageEmbedder(
        provider, settings.model, settings, options.get("dimensions"), instruction
    )


class Client:
    """One actor's client of the server: what it asks (prompts, embeddings, batches) and the
    answers it keeps; the requests go through its ``Transport``. Built on the worker by
    ``instantiate``."""

    def __init__(
        self,
        settings: ClientSettings,
        dimensions: int | None = None,
        instruction: str | None = None,
    ) -> None:
        self.settings = settings
        self.dimensions = dimensions
        self.instruction = instruction
        self.http = Transport(settings)
        self.base_url = self.http.base_url
        self._limiter = self.http.limiter
        self._cache = AnswerCache(settings.cache) if settings.cache else None
        self._inflight: dict[str, asyncio.Future[Answer]] = {}
        self._batches: BatchDispatch | None = None
        if settings.mode == "batch":
            assert settings.journal is not None
            self._batches = BatchDispatch(
                self, settings.journal, settings.batch_poll_interval, settings.batch_fallback
            )

    async def _post(self, path: str, body: Mapping[str, Any], tokens: int, usage: Usage) -> Any:
        """The server's JSON reply, after retries; ``ProviderError`` when it will not come
        (``RequestRefused`` when the server refused what the request holds)."""
        return await self.http.send("POST", path, usage, json.dumps(body).encode(), tokens=tokens)

    # ---- prompts ------------------------------------------------------------------------------

    async def answer(
        self, requests: Sequence[PromptRequest], usage: Usage, read: Read
    ) -> list[Answer]:
        if self._batches is not None:
            return await self._answer_in_batch(self._batches, requests, usage, read)
        return list(await asyncio.gather(*(self._answer(r, usage, read) for r in requests)))

    def _key(self, request: PromptRequest) -> str:
        """What the cache (and the journal of batches) knows a request by."""
        return request_key(
            {
                "provider": self.settings.provider,
                # a server vane started listens at a new port each run: its name and model
                # decide the answer
                "url": self.settings.route.name if self.settings.route else self.base_url,
                "model": self.settings.model,
                "messages": request.messages,
                "options": request.options,
            }
        )

    def _kept(self, key: str, usage: Usage, read: Read) -> Answer | None:
        """The cached answer for ``key``, if there is one that is an answer."""
        kept = self._cache.get(key) if self._cache is not None else None
        if kept is None:
            return None
        answer = answered(kept.text, read, kept.prompt_tokens, kept.completion_tokens)
        if answer.error is None:
            usage.cache_hits += 1
            return answer
        # Kept by an older vane that kept what it should not have: ask again.
        assert self._cache is not None
        self._cache.unreadable(f"a kept answer is no answer ({answer.error})")
        return None

    def _keep(self, key: str, answer: Answer, text: Any) -> None:
        if self._cache is not None and answer.error is None:  # a failure is asked again
            self._cache.put(key, text, answer.prompt_tokens, answer.completion_tokens)

    async def _answer(self, request: PromptRequest, usage: Usage, read: Read) -> Answer:
        if self._cache is None:
            answer, _ = await self._ask(request, usage, read)
            return answer
        key = self._key(request)
        running = self._inflight.get(key)
        if running is not None:  # the same request, already on its way: send it once
            usage.cache_hits += 1
            return await asyncio.shield(running)
        kept = self._kept(key, usage, read)
        if kept is not None:
            return kept
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            answer, text = await self._ask(request, usage, read)
            self._keep(key, answer, text)
            future.set_result(answer)
            return answer
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        finally:
            del self._inflight[key]

    async def _answer_in_batch(
        self, batches: BatchDispatch, requests: Sequence[PromptRequest], usage: Usage, read: Read
    ) -> list[Answer]:
        """The same requests, answered from the cache, else by a provider batch, else (what
        the batch did not answer) live or as the row's error, as ``batch_fallback`` says. A
        request that another call of this actor is already asking is sent once, as live."""
        keys = [self._key(request) for request in requests]
        answers: dict[str, Answer] = {}
        pending: dict[str, PromptRequest] = {}
        elsewhere: dict[str, asyncio.Future[Answer]] = {}
        for key, request in zip(keys, requests, strict=True):
            if key in answers or key in pending or key in elsewhere:  # twice: sent once
                usage.cache_hits += 1
                continue
            if key in self._inflight:
                usage.cache_hits += 1
                elsewhere[key] = self._inflight[key]
                continue
            kept = self._kept(key, usage, read)
            if kept is not None:
                answers[key] = kept
            else:
                pending[key] = request
        if pending:
            loop = asyncio.get_running_loop()
            mine = {key: loop.create_future() for key in pending}
            self._inflight.update(mine)
            try:
                answers.update(await self._batched(batches, pending, usage, read))
                for key, future in mine.items():
                    future.set_result(answers[key])
            except BaseException as exc:
                for future in mine.values():
                    future.set_exception(exc)
                    future.exception()  # retrieved: no warning if nobody waits
                raise
            finally:
                for key in mine:
                    del self._inflight[key]
        for key, future in elsewhere.items():
            answers[key] = await asyncio.shield(future)
        return [answers[key] for key in keys]

    async def _batched(
        self,
        batches: BatchDispatch,
        pending: Mapping[str, PromptRequest],
        usage: Usage,
        read: Read,
    ) -> dict[str, Answer]:
        """``pending``'s answers (by key), each kept in the cache as it is read."""
        answers: dict[str, Answer] = {}
        live = []
        for key, outcome in (await batches.outcomes(pending)).items():
            if outcome.reply is not None:
                answer, text = self._read(outcome.reply, usage, read, batched=True)
                self._keep(key, answer, text)
                answers[key] = answer
            elif self.settings.batch_fallback == "live":
                live.append(key)
            else:
                answers[key] = Answer(error=str(outcome.error))

        async def ask_live(key: str) -> Answer:
            answer, text = await self._ask(pending[key], usage, read)
            self._keep(key, answer, text)
            return answer

        answers.update(zip(live, await asyncio.gather(*map(ask_live, live)), strict=True))
        batches.delivered(pending)
        return answers

    def chat_body(self, request: PromptRequest) -> dict[str, Any]:
        """The body of ``/chat/completions`` for ``request``: sent live, or as a batch's line."""
        body = {"model": self.settings.model, "messages": list(request.messages)}
        body.update(request.options)
        return body

    async def _ask(self, request: PromptRequest, usage: Usage, read: Read) -> tuple[Answer, Any]:
        """The row's answer, and the model's text it was read from."""
        body = self.chat_body(request)
        estimate = sum(len(str(m.get("content", ""))) for m in request.messages) // 4
        estimate += replies.count(request.options.get("max_tokens"))
        try:
            reply = await self._post("/chat/completions", body, estimate, usage)
        except ProviderError as exc:
            return Answer(error=str(exc)), None
        answer, text = self._read(reply, usage, read)
        self._limiter.settle(estimate, answer.prompt_tokens + answer.completion_tokens)
        return answer, text

    def _read(
        self, reply: Any, usage: Usage, read: Read, *, batched: bool = False
    ) -> tuple[Answer, Any]:
        """A chat completion's answer (counted), and the model's text it was read from."""
        prompt_tokens, completion_tokens = replies.tokens(reply)
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += completion_tokens
        if batched:  # billed at the Batch API's price
            usage.batch_requests += 1
            usage.batch_prompt_tokens += prompt_tokens
            usage.batch_completion_tokens += completion_tokens
        try:
            text = replies.chat_text(reply)
        except ValueError as exc:
            url = f"{self.base_url}/chat/completions"
            return Answer(None, f"{url}: {exc}", prompt_tokens, completion_tokens), None
        return answered(text, read, prompt_tokens, completion_tokens), text

    # ---- embeddings ---------------------------------------------------------------------------

    async def embed(self, texts: Sequence[str], usage: Usage) -> list[Answer]:
        """One vector per text, each an ``Answer``: a reply that holds no usable vector for a
        text fails that text only. ``ProviderError`` when the request failed, or its reply
        says nothing readable about any text."""
        body: dict[str, Any] = {"model": self.settings.model, "input": list(texts)}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        url = f"{self.base_url}/embeddings"
        reply = await self._post("/embeddings", body, sum(len(t) for t in texts) // 4, usage)
        usage.prompt_tokens += replies.tokens(reply)[0]
        try:
            return replies.vectors(reply, len(texts), self.dimensions)
        except ValueError as exc:
            raise ProviderError(f"{url}: {exc}") from None

    async def embed_images(self, urls: Sequence[str], usage: Usage) -> list[Answer]:
        """One vector per image (a URL, or a ``data:`` URI of its bytes), each an ``Answer``:
        each image is a request of its own, so one that fails fails its row only.

        The request is vLLM's for images (its embeddings endpoint's chat-style form, which
        SGLang and others copied): ``messages`` holding one user message of an ``image_url``
        part (and the ``instruction`` as a text part), instead of ``input``; one conversation
        is one embedding. OpenAI's own embedding models take text only."""
        return list(await asyncio.gather(*(self._embed_image(url, usage) for url in urls)))

    async def _embed_image(self, url: str, usage: Usage) -> Answer:
        parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}}]
        if self.instruction:
            parts.append({"type": "text", "text": self.instruction})
        body: dict[str, Any] = {
            "model": self.settings.model,
            "messages": [{"role": "user", "content": parts}],
            "encoding_format": "float",
        }
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        try:
            reply = await self._post("/embeddings", body, IMAGE_TOKENS, usage)
        except ProviderError as exc:
            return Answer(error=str(exc))
        usage.prompt_tokens += replies.tokens(reply)[0]
        try:
            [answer] = replies.vectors(reply, 1, self.dimensions)
        except ValueError as exc:
            return Answer(error=f"{self.base_url}/embeddings: {exc}")
        return answer

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
        if self._batches is not None:
            self._batches.journal.close()

    async def aclose(self) -> None:
        """Close the connection pool on the actor's event loop (where it was made), then the
        cache."""
        await self.http.aclose()
        self.close()
