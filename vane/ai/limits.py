"""Rate limits and retry timing for hosted models, as the official OpenAI client times them.

Limits are per actor: with ``concurrency=n``, give each actor a share (``requests_per_minute``
divided by ``n``). They are smooth: requests are spaced out, not released in bursts.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import random
import time
from collections.abc import Mapping

# The official client's backoff: 0.5 s doubling to 8 s, less up to a quarter of jitter.
INITIAL_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0
MAX_RETRY_AFTER_SECONDS = 60.0
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


def backoff_seconds(attempt: int, headers: Mapping[str, str] | None = None) -> float:
    """How long to wait before retry number ``attempt`` (0-based): the server's
    ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date) when it gives a sensible
    one, else exponential backoff with jitter."""
    if headers:
        lowered = {k.lower(): v for k, v in headers.items()}
        told = _retry_after(lowered)
        if told is not None and 0 <= told <= MAX_RETRY_AFTER_SECONDS:
            return told
    base = min(INITIAL_BACKOFF_SECONDS * 2**attempt, MAX_BACKOFF_SECONDS)
    return float(base * (1 - 0.25 * random.random()))


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked for, or None when it asked for nothing this reads: a header
    that is neither a number nor an HTTP date is the server's mistake, not a reason to fail."""
    if "retry-after-ms" in headers:
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": a date in UTC with no zone said
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - time.time())


class RateLimiter:
    """Requests per minute and tokens per minute, as two smooth buckets; either may be off.

    ``acquire(tokens)`` waits until a request costing about ``tokens`` fits both; ``settle``
    corrects the token bucket once the real count is known.
    """

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None):
        self._request_interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._token_rate = tokens_per_minute / 60.0 if tokens_per_minute else 0.0
        self._token_capacity = float(tokens_per_minute or 0.0)
        self._tokens = self._token_capacity
        self._next_request = 0.0
        self._updated = time.monotonic()
        self._lock = asyncio.Lock()

    @property
    def active(self) -> bool:
        return bool(self._request_interval or self._token_rate)

    async def acquire(self, tokens: int = 0) -> None:
        if not self.active:
            return
        async with self._lock:  # waiters queue in order, so nobody starves
            now = time.monotonic()
            if self._request_interval:
                wait = self._next_request - now
                if wait > 0:
                    await asyncio.sleep(wait)
                    now = time.monotonic()
                self._next_request = max(self._next_request, now) + self._request_interval
            if self._token_rate:
                self._refill(now)
                need = min(float(tokens), self._token_capacity)
                if self._tokens < need:
                    await asyncio.sleep((need - self._tokens) / self._token_rate)
                    self._refill(time.monotonic())
                self._tokens -= need

    def settle(self, estimated: int, actual: int) -> None:
        if self._token_rate:
            self._tokens = min(self._token_capacity, self._tokens + estimated - actual)

    def _refill(self, now: float) -> None:
        self._tokens = min(
            self._token_capacity, self._tokens + (now - self._updated) * self._token_rate
        )
        self._updated = now


# What an image is taken to cost in input tokens, before a reply says (a 512 x 512 image is 85
# to 765 tokens to OpenAI's vision models, by detail): for tokens_per_minute, and estimates.
IMAGE_TOKENS = 256
