"""Any OpenAI-compatible HTTP server: OpenAI, vLLM's and SGLang's servers, LM Studio, Ollama.

``prompt`` uses ``/chat/completions``, ``embed_text`` ``/embeddings``. The client is aiohttp, not
the official SDK: measured against a loopback server answering in 50 ms with 64 requests in
flight, the SDK's loop reached about a third of a plain aiohttp loop's rate, the limit on a
small machine being the client's CPU. It behaves as the official client does where it matters:
it retries 408, 409, 429, 5xx, connection errors and timeouts with exponential backoff and
jitter (``max_retries``, default 5), honouring ``retry-after-ms`` and ``Retry-After``; other
errors are final. A reply that is not valid JSON is treated as a server error and retried.

Options: ``base_url`` (else ``OPENAI_BASE_URL``, else OpenAI's), ``api_key`` (else
``OPENAI_API_KEY``), ``max_concurrent_requests`` (64, per actor), ``requests_per_minute``,
``tokens_per_minute``, ``max_retries``, ``timeout`` (seconds per request, 600), ``cache`` (a
directory; see ``cache.py``); anything else (``temperature``, ``max_tokens``, ``top_p``,
``seed``, ``stop``, ...) is sent with each request.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vane.ai.cache import AnswerCache, request_key
from vane.ai.limits import RETRYABLE_STATUS, RateLimiter, backoff_seconds
from vane.ai.protocols import Answer, PromptRequest, Usage
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
}


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


def _settings(provider: str, model: str | None, options: Mapping[str, Any]) -> ClientSettings:
    require_packages(provider, {"aiohttp": "openai"})
    if not model:
        raise ConfigurationError(
            f"provider {provider!r} needs model=, the name the server knows the model by"
        )
    base_url = str(options.get("base_url") or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
    api_key = options.get("api_key") or os.environ.get("OPENAI_API_KEY")
    if api_key is None and base_url.rstrip("/") == OPENAI_URL:
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
    )


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


def prompter(provider: str, model: str | None, options: Mapping[str, Any]) -> OpenAIPrompter:
    settings = _settings(provider, model, options)
    generation = {k: v for k, v in options.items() if k not in _CLIENT_OPTIONS}
    return OpenAIPrompter(provider, settings.model, settings, generation)


def text_embedder(
    provider: str, model: str | None, options: Mapping[str, Any]
) -> OpenAITextEmbedder:
    settings = _settings(provider, model, options)
    return OpenAITextEmbedder(provider, settings.model, settings, options.get("dimensions"))


class _Retry(Exception):
    """A failure worth another attempt; ``headers`` may say how long to wait."""

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers


class Client:
    """One actor's connection pool to the server; built on the worker by ``instantiate``."""

    def __init__(self, settings: ClientSettings, dimensions: int | None = None) -> None:
        self.settings = settings
        self.dimensions = dimensions
        self._session: Any = None  # an aiohttp session, made on the actor's event loop
        self._slots: asyncio.Semaphore | None = None
        self._limiter = RateLimiter(settings.requests_per_minute, settings.tokens_per_minute)
        self._cache = AnswerCache(settings.cache) if settings.cache else None
        self._inflight: dict[str, asyncio.Future[Answer]] = {}

    # ---- HTTP ---------------------------------------------------------------------------------

    def _open(self) -> Any:
        if self._session is None:
            import aiohttp

            headers = {"Content-Type": "application/json"}
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
        """The server's JSON reply, after retries; ``ProviderError`` when it will not come."""
        import aiohttp

        session = self._open()
        assert self._slots is not None
        url = f"{self.settings.base_url}{path}"
        payload = json.dumps(body)
        last = ""
        async with self._slots:
            for attempt in range(self.settings.max_retries + 1):
                if attempt:
                    usage.retries += 1
                await self._limiter.acquire(tokens)
                try:
                    usage.requests += 1
                    async with session.post(url, data=payload) as response:
                        text = await response.text()
                        if response.status == 200:
                            try:
                                return json.loads(text)
                            except json.JSONDecodeError:
                                raise _Retry(f"the reply is not JSON: {text[:80]!r}") from None
                        message = _error_message(text)
                        if response.status in RETRYABLE_STATUS:
                            raise _Retry(f"HTTP {response.status}: {message}", response.headers)
                        raise ProviderError(
                            f"{self.settings.base_url} answered HTTP {response.status}: {message}"
                        )
                except _Retry as retry:
                    last, headers = str(retry), retry.headers
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    last, headers = f"{type(exc).__name__}: {exc}".rstrip(": "), None
                if attempt < self.settings.max_retries:
                    await asyncio.sleep(backoff_seconds(attempt, headers))
        raise ProviderError(f"{url} failed {self.settings.max_retries + 1} time(s); last: {last}")

    # ---- prompts ------------------------------------------------------------------------------

    async def answer(self, requests: Sequence[PromptRequest], usage: Usage) -> list[Answer]:
        return list(await asyncio.gather(*(self._answer(r, usage) for r in requests)))

    async def _answer(self, request: PromptRequest, usage: Usage) -> Answer:
        if self._cache is None:
            return await self._ask(request, usage)
        key = request_key(
            {
                "provider": self.settings.provider,
                "url": self.settings.base_url,
                "model": self.settings.model,
                "messages": request.messages,
                "options": request.options,
            }
        )
        running = self._inflight.get(key)
        if running is not None:  # the same request, already on its way: send it once
            usage.cache_hits += 1
            return await asyncio.shield(running)
        cached = self._cache.get(key)
        if cached is not None:
            usage.cache_hits += 1
            value, prompt_tokens, completion_tokens = cached
            return Answer(value, None, prompt_tokens, completion_tokens)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            answer = await self._ask(request, usage)
            if answer.error is None:
                self._cache.put(key, answer.value, answer.prompt_tokens, answer.completion_tokens)
            future.set_result(answer)
            return answer
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        finally:
            del self._inflight[key]

    async def _ask(self, request: PromptRequest, usage: Usage) -> Answer:
        body = {"model": self.settings.model, "messages": list(request.messages)}
        body.update(request.options)
        estimate = sum(len(str(m.get("content", ""))) for m in request.messages) // 4
        estimate += int(request.options.get("max_tokens") or 0)
        try:
            reply = await self._post("/chat/completions", body, estimate, usage)
        except ProviderError as exc:
            usage.failures += 1
            return Answer(error=str(exc))
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            usage.failures += 1
            return Answer(error=f"the reply has no choices[0].message.content: {str(reply)[:120]}")
        counts = reply.get("usage") or {}
        prompt_tokens = int(counts.get("prompt_tokens") or 0)
        completion_tokens = int(counts.get("completion_tokens") or 0)
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += completion_tokens
        self._limiter.settle(estimate, prompt_tokens + completion_tokens)
        return Answer(content, None, prompt_tokens, completion_tokens)

    # ---- embeddings ---------------------------------------------------------------------------

    async def embed(self, texts: Sequence[str], usage: Usage) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.settings.model, "input": list(texts)}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        reply = await self._post("/embeddings", body, sum(len(t) for t in texts) // 4, usage)
        data = sorted(reply.get("data", []), key=lambda item: item.get("index", 0))
        if len(data) != len(texts):
            raise ProviderError(
                f"{self.settings.base_url}/embeddings returned {len(data)} embeddings for "
                f"{len(texts)} texts"
            )
        usage.prompt_tokens += int((reply.get("usage") or {}).get("prompt_tokens") or 0)
        return [item["embedding"] for item in data]

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()

    async def aclose(self) -> None:
        """Close the connection pool on the actor's event loop (where it was made), then the
        cache."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        self.close()


def _error_message(text: str) -> str:
    """The server's own words about an error (OpenAI puts them in error.message)."""
    try:
        body = json.loads(text)
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    except (json.JSONDecodeError, AttributeError):
        message = None
    return " ".join(str(message or text or "no body").split())[:300]
