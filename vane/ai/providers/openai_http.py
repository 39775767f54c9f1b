"""The HTTP side of the OpenAI-compatible client: one actor's connection pool to its server,
each request retried as the official client retries, rate-limited, and counted while in flight
for the progress display; with ``server=``, a request lost with a server that died waits for
its restart. ``openai.py`` says what it sends; this module says how.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vane._environ import NODE_ID_ENV
from vane._text import counted
from vane.ai.limits import RETRYABLE_STATUS, RateLimiter, backoff_seconds
from vane.ai.node_server import LOCAL_NODE, NodeEntry, ServerRoute, read_state
from vane.ai.protocols import NotFound, RequestRefused, Usage
from vane.errors import ProviderError
from vane.observe.requests import counts_for

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


class _Retry(Exception):
    """A failure worth another attempt; ``headers`` may say how long to wait."""

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers


class Transport:
    """One actor's requests to its server: the aiohttp session (made on the actor's event loop,
    on first use), the concurrency and rate limits, retries, and, with ``server=``, this node's
    server and its restarts."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._session: Any = None  # an aiohttp session, made on the actor's event loop
        self._request_limit: asyncio.Semaphore | None = None
        self.limiter = RateLimiter(settings.requests_per_minute, settings.tokens_per_minute)
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
        # Requests in flight to this server, for the progress display; None outside an actor
        self._counts = counts_for(server_label(self.base_url, self._node))

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
            self._request_limit = asyncio.Semaphore(self.settings.max_concurrent_requests)
        return self._session

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
        assert self._request_limit is not None
        url = f"{self.base_url}{path}"
        headers_sent = {"Content-Type": content_type} if content_type else None
        last = ""
        async with self._request_limit:
            attempt, resent = 0, False
            while attempt <= self.settings.max_retries:
                if self._absent is not None:
                    raise ProviderError(self._absent)
                if attempt or resent:
                    usage.retries += 1
                await self.limiter.acquire(tokens)
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

    async def aclose(self) -> None:
        """Close the connection pool on the actor's event loop, where it was made."""
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # the sockets close on the loop's next turn: let it come


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
