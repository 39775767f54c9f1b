"""``url_download``'s worker: one aiohttp session per actor, built on the actor's event loop the
first time a batch arrives, so every batch the actor runs at once shares one connection pool
and one per-host limit (a batch per session would multiply the limit by the batches in flight).

Each URL is fetched with retries: connection errors, resets, timeouts, 429 and 5xx answers are
tried again after an exponential backoff with jitter; other answers (404, 403) are final at
once. A URL that still fails is that row's failure, reported to the step, whose ``on_error``
makes it an error naming the row or a null. Local paths and ``file://`` URLs are read from
disk; protocols aiohttp does not speak are opened through ``vane.File`` (``pyarrow.fs``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa

from vane._deps import require
from vane._retry import TRANSIENT_STATUS, backoff_seconds, lasting
from vane.types.files import File, is_file_type, local_path
from vane.udf.column_calls import RowResults
from vane.udf.decorators import method


class _Failure(Exception):
    """A final answer for one URL: no retry will change it."""


class Downloader:
    """Built once per actor (never in the driver); ``download`` is its batch method."""

    def __init__(self, max_connections: int, timeout: float | None, max_retries: int) -> None:
        self._max_connections = max_connections
        self._timeout = timeout
        self._max_retries = max_retries
        self._session: Any = None

    def _client(self) -> Any:
        if self._session is None:
            aiohttp = require("aiohttp", extra="image")
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._max_connections)
            timeout = aiohttp.ClientTimeout(total=self._timeout)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    @method.batch(return_dtype="BLOB")  # type: ignore[untyped-decorator]
    async def download(self, urls: pa.Array) -> Any:
        values = urls.to_pylist()
        if is_file_type(urls.type):
            values = [None if v is None else v["url"] for v in values]
        results = await asyncio.gather(*(self._one(url) for url in values))
        errors = [error for _, error in results]
        data = pa.array([value for value, _ in results], pa.binary())
        return RowResults(data, errors) if any(e is not None for e in errors) else data

    async def _one(self, url: str | None) -> tuple[bytes | None, str | None]:
        if url is None:
            return None, None
        if local_path(url) is not None or not url.lower().startswith(("http://", "https://")):
            try:
                return await asyncio.to_thread(File(url).read), None
            except Exception as exc:  # a missing file fails its own row
                return None, f"cannot read {url}: {exc}"
        aiohttp = require("aiohttp", extra="image")
        attempt = 0
        while True:
            try:
                return await self._get(url), None
            except _Failure as exc:
                return None, str(exc)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                reason = _describe(exc)
                if lasting(exc):  # a certificate refused, a TLS failure: no retry mends it
                    return None, f"GET {url} failed: {reason}"
            except _Retryable as exc:
                reason = str(exc)
            if attempt >= self._max_retries:
                tries = "1 attempt" if attempt == 0 else f"{attempt + 1} attempts"
                return None, f"GET {url} failed after {tries}: {reason}"
            attempt += 1
            await asyncio.sleep(backoff_seconds(attempt))

    async def _get(self, url: str) -> bytes:
        async with self._client().get(url) as response:
            if response.status in TRANSIENT_STATUS:
                raise _Retryable(f"HTTP {response.status} {response.reason}")
            if response.status >= 400:
                raise _Failure(f"GET {url}: HTTP {response.status} {response.reason}")
            body: bytes = await response.read()
            return body

    async def teardown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _Retryable(Exception):
    """An answer worth asking again (429, 5xx)."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
