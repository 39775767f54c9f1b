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
import errno
import json
import math
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vane._text import counted
from vane.ai.cache import AnswerCache, request_key
from vane.ai.limits import RETRYABLE_STATUS, RateLimiter, backoff_seconds
from vane.ai.node_server import LOCAL_NODE, NODE_ID_ENV, NodeEntry, ServerRoute, read_state
from vane.ai.protocols import (
    Answer,
    NotFound,
    PromptRequest,
    Read,
    RequestRefused,
    Usage,
    answered,
)
from vane.ai.providers.openai_batch import BatchDispatch
from vane.ai.registry import require_packages
from vane.errors import ConfigurationError, ProviderError
from vane.observe.requests import counts_for

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
# What an image is taken to cost, for tokens_per_minute, before the reply says (a 512 x 512
# image is 85 to 765 tokens to OpenAI's vision models, by detail).
_IMAGE_TOKENS = 256
# Final statuses that may be caused by what the request carried (one text too long, say).
_REFUSED_FOR_CONTENT = frozenset({400, 413, 422})


@dataclass(frozen=True)
class ClientSettings:
    provider: str
    model: str
    base_url: str
    api_key: str | None
    max_concurrent_requests: int = 64
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    max_retries: int = 5
    timeout: float = 600.0
    cache: str | None = None
    route: ServerRoute | None = None  # a server per node (``server=``): each actor asks its own
    # mode="batch": the Batch API (``openai_batch.py``), its poll interval, what an item it
    # did not answer becomes, and the directory of the journal of the batches submitted
    mode: str = "live"
    batch_poll_interval: float = 30.0
    batch_fallback: str = "live"
    journal: str | None = None

    def __vane_identity__(self) -> str:
        """What a resumable write knows these settings by: the server by its name when it is
        a server per node (its address changes from run to run), never the key."""
        where = self.route.__vane_identity__() if self.route is not None else self.base_url
        return (
            f"{self.provider} {self.model} at {where}; limits {self.max_concurrent_requests} "
            f"{self.requests_per_minute} {self.tokens_per_minute} {self.max_retries}"
        )


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


class _Retry(Exception):
    """A failure worth another attempt; ``headers`` may say how long to wait."""

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers


class Client:
    """One actor's connection pool to the server; built on the worker by ``instantiate``."""

    def __init__(
        self,
        settings: ClientSettings,
        dimensions: int | None = None,
        instruction: str | None = None,
    ) -> None:
        self.settings = settings
        self.dimensions = dimensions
        self.instruction = instruction
        self._session: Any = None  # an aiohttp session, made on the actor's event loop
        self._slots: asyncio.Semaphore | None = None
        self._limiter = RateLimiter(settings.requests_per_minute, settings.tokens_per_minute)
        self._cache = AnswerCache(settings.cache) if settings.cache else None
        self._inflight: dict[str, asyncio.Future[Answer]] = {}
        self._answered_once = False  # the server has sent a reply, of any status
        self._absent: str | None = None  # why no server is there, once a request found out
        # server=: this node's server, how often it has restarted as far as this actor knows,
        # and the one wait for it to come back that every failed request shares
        self._node: NodeEntry | None = settings.route.here() if settings.route else None
        self.base_url = settings.base_url
        if self._node is not None:
            assert settings.route is not None
            self.base_url = self._node.address + settings.route.api_path
        state = read_state(self._node) if self._node is not None else None
        self._restarts = int(state.get("restarts", 0)) if state else 0
        self._comeback: asyncio.Future[int] | None = None
        self._batches: BatchDispatch | None = None
        if settings.mode == "batch":
            assert settings.journal is not None
            self._batches = BatchDispatch(
                self, settings.journal, settings.batch_poll_interval, settings.batch_fallback
            )
        # Requests in flight to this server, for the progress display; None outside an actor
        self._counts = counts_for(server_label(self.base_url, self._node))

    # ---- HTTP ---------------------------------------------------------------------------------

    def _open(self) -> Any:
        if self._session is None:
            import aiohttp

            headers = {"Content-Type": "application/json"}
            if self._node is not None:  # a server vane started: say which node asks
                node = os.environ.get(NODE_ID_ENV, self._node.node)
                headers["User-Agent"] = f"vane-data (node {node})"
            if self.settings.api_key:
                headers["Authorization"] = f"Bearer {self.settings.api_key}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(limit=self.settings.max_concurrent_requests),
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout),
            )
            self._slots = asyncio.Semaphore(self.settings.max_concurrent_requests)
        return self._session

    async def _post(self, path: str, body: Mapping[str, Any], tokens: int, usage: Usage) -> Any:
        """The server's JSON reply, after retries; ``ProviderError`` when it will not come
        (``RequestRefused`` when the server refused what the request holds)."""
        return await self.send("POST", path, usage, json.dumps(body).encode(), tokens=tokens)

    async def send(
        self,
        method: str,
        path: str,
        usage: Usage,
        payload: bytes | None = None,
        *,
        tokens: int = 0,
        content_type: str | None = None,
        raw: bool = False,
    ) -> Any:
        """One request to the server, retried as every request is: its JSON reply (its bytes
        with ``raw``), or ``ProviderError``. ``content_type`` replaces JSON's (a file upload's
        multipart form)."""
        import aiohttp

        session = self._open()
        assert self._slots is not None
        url = f"{self.base_url}{path}"
        headers_sent = {"Content-Type": content_type} if content_type else None
        last = ""
        async with self._slots:
            attempt, resent = 0, False
            while attempt <= self.settings.max_retries:
                if self._absent is not None:
                    raise ProviderError(self._absent)
                if attempt or resent:
                    usage.retries += 1
                await self._limiter.acquire(tokens)
                headers: Mapping[str, str] | None = None
                restarts_before = self._restarts
                try:
                    usage.requests += 1
                    return await self._exchange(
                        session,
                        (method, url, payload, headers_sent),
                        raw=raw,
                        retry=bool(attempt or resent),
                    )
                except _Retry as retry:
                    last, headers = str(retry), retry.headers
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    if self._node is not None and await self._server_back() > restarts_before:
                        # the server died with the request and is back: send it again there,
                        # as the retry it is, without spending one of its attempts
                        resent = True
                        continue
                    self._check_present(exc)
                    last = f"{type(exc).__name__}: {exc}".rstrip(": ")
                if attempt < self.settings.max_retries:
                    await asyncio.sleep(backoff_seconds(attempt, headers))
                attempt += 1
        attempts = counted(self.settings.max_retries + 1, "time")
        raise ProviderError(f"{url} failed {attempts}; last: {last}")

    async def _exchange(
        self,
        session: Any,
        request: tuple[str, str, bytes | None, Mapping[str, str] | None],
        *,
        raw: bool,
        retry: bool,
    ) -> Any:
        """One attempt at ``request`` (method, URL, payload, headers): the reply's JSON (its
        bytes with ``raw``), or ``_Retry``, ``ProviderError`` or the transport's error. While it
        runs, the request counts as in flight to this server (``_counts``)."""
        method, url, payload, headers = request
        counts = self._counts
        if counts is not None:
            counts.in_flight += 1
            counts.sent += 1
            counts.retried += retry
            counts.moved()
        try:
            async with session.request(method, url, data=payload, headers=headers) as response:
                self._answered_once = True
                body = await response.read()
                if response.status == 200:
                    if raw:
                        return body
                    try:
                        return json.loads(body)
                    except (ValueError, RecursionError):  # not JSON, or not text
                        raise _Retry(f"the reply is not JSON: {body[:80]!r}") from None
                message = _error_message(body)
                if response.status in RETRYABLE_STATUS:
                    raise _Retry(f"HTTP {response.status}: {message}", response.headers)
                error = f"{url} answered HTTP {response.status}: {message}"
                if response.status in _REFUSED_FOR_CONTENT:
                    raise RequestRefused(error)
                if response.status == 404:
                    raise NotFound(error)
                raise ProviderError(error)
        finally:  # the exchange is over, however it went
            if counts is not None:
                counts.in_flight -= 1
                counts.moved()

    def _check_present(self, exc: BaseException) -> None:
        """``ProviderError`` at once when ``exc`` says no server is there at all (nothing has
        answered yet, and the address refuses or does not resolve): retrying would only delay
        saying so. A server vane started is there: it was waited for."""
        if self._answered_once or self._node is not None:
            return
        absent = _no_server(exc)
        if absent is not None:
            self._absent = (
                f"cannot reach {self.base_url}: {absent}. Start the server, "
                "or pass the base_url= it listens at"
            )
            raise ProviderError(self._absent) from None

    async def _server_back(self) -> int:
        """Once this node's server answers its health check again, how many times it has
        restarted; ``ServerError`` (with its log's tail) when it will not come back. Requests
        that fail together wait together: one waits, the others share its answer."""
        assert self._node is not None
        assert self.settings.route is not None
        if self._comeback is None or self._comeback.done():
            wait = asyncio.to_thread(self.settings.route.wait_until_serving, self._node)
            self._comeback = asyncio.ensure_future(wait)
        restarts = await asyncio.shield(self._comeback)
        self._restarts = max(self._restarts, restarts)
        return restarts

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
        estimate += _count(request.options.get("max_tokens"))
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
        prompt_tokens, completion_tokens = _tokens(reply)
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += completion_tokens
        if batched:  # billed at the Batch API's price
            usage.batch_requests += 1
            usage.batch_prompt_tokens += prompt_tokens
            usage.batch_completion_tokens += completion_tokens
        try:
            text = _chat_text(reply)
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
        usage.prompt_tokens += _tokens(reply)[0]
        try:
            return _vectors(reply, len(texts), self.dimensions)
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
            reply = await self._post("/embeddings", body, _IMAGE_TOKENS, usage)
        except ProviderError as exc:
            return Answer(error=str(exc))
        usage.prompt_tokens += _tokens(reply)[0]
        try:
            [answer] = _vectors(reply, 1, self.dimensions)
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
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # the sockets close on the loop's next turn: let it come
        self.close()


def server_label(base_url: str, node: NodeEntry | None) -> str:
    """How the progress display names a server: its base URL, and, for one of a server's
    nodes on Ray (``vane.ai.serve``), which node (the start of its Ray node id)."""
    if node is None or node.node == LOCAL_NODE:
        return base_url
    return f"{base_url} (node {node.node[:8]})"


def _no_server(exc: BaseException) -> str | None:
    """Why no server can be there (nothing listens at the address, or its host name does not
    resolve), or None for a failure that another attempt may not meet (a timeout, a reset)."""
    import aiohttp

    if not isinstance(exc, aiohttp.ClientConnectorError):
        return None
    cause = exc.os_error
    if isinstance(cause, socket.gaierror):
        return f"the host name {exc.host!r} does not resolve ({cause.strerror or cause})"
    if cause.errno == errno.ECONNREFUSED:
        return f"nothing listens at {exc.host}:{exc.port} (connection refused)"
    return None


# ---- reading replies --------------------------------------------------------------------------


def _shown(value: Any) -> str:
    try:
        return json.dumps(value, default=repr)[:120]
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too deep to show"


def _chat_text(reply: Any) -> Any:
    """The answer in a chat completion: ``choices[0].message.content``, as it is (the caller's
    ``read`` decides whether it is text), or ``ValueError`` saying why the reply holds none."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"the reply has no choices: {_shown(reply)}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ValueError(f"the reply's choices[0] has no message: {_shown(choice)}")
    content = message.get("content")
    if content is not None:
        return content
    refusal = message.get("refusal")
    if refusal:
        raise ValueError(f"the model refused to answer: {_shown(refusal)}")
    if message.get("tool_calls") or message.get("function_call"):
        raise ValueError(
            "the model called a tool instead of answering (prompt() asks for text; drop the "
            "tools from the request)"
        )
    finish = choice.get("finish_reason")
    raise ValueError(f"the reply holds no answer (content is null; finish_reason {finish!r})")


_MAX_COUNT = 2**53  # past this a "count" is no count of tokens


def _count(value: Any) -> int:
    """A token count as a server reported it; anything that is not a count is 0 (not
    reported), never a failure of an answer that came."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < _MAX_COUNT else 0


def _tokens(reply: Any) -> tuple[int, int]:
    counts = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(counts, dict):
        return 0, 0
    return _count(counts.get("prompt_tokens")), _count(counts.get("completion_tokens"))


def _vectors(reply: Any, texts: int, dimensions: int | None) -> list[Answer]:
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, list):
        raise ValueError(f"the reply has no data: {_shown(reply)}")
    if len(data) != texts:
        raise ValueError(f"the reply holds {len(data)} embeddings for {texts} texts")
    indexes = [item.get("index") if isinstance(item, dict) else None for item in data]
    if any(i is not None for i in indexes):  # in any order, each text's once
        by_index = dict(zip(indexes, data, strict=True))
        if (
            len(by_index) != texts
            or any(type(i) is not int or i not in by_index for i in range(texts))
            or any(type(i) is not int for i in indexes)
        ):
            raise ValueError(f"the reply's indexes are not 0..{texts - 1}: {_shown(indexes[:10])}")
        data = [by_index[i] for i in range(texts)]
    return [_vector(item, dimensions) for item in data]


def _vector(item: Any, dimensions: int | None) -> Answer:
    vector = item.get("embedding") if isinstance(item, dict) else None
    if not isinstance(vector, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector
    ):
        return Answer(error=f"the reply holds no embedding for this text: {_shown(item)}")
    if dimensions is not None and len(vector) != dimensions:
        return Answer(
            error=f"the reply's embedding has {len(vector)} numbers, not dimensions={dimensions}"
        )
    if not vector:
        return Answer(error="the reply's embedding is empty")
    return Answer(vector)


def _error_message(raw: bytes) -> str:
    """The server's own words about an error (OpenAI puts them in error.message)."""
    text = raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return " ".join(str(message or text or "no body").split())[:300]
