"""When an HTTP read is worth asking again, and how long to wait first: shared by the reads of
fsspec objects (``io/storage.py``) and ``download_url``'s GETs (``functions/_urls.py``). (The AI
providers follow the OpenAI client's own rules instead: ``ai/limits.py``.)"""

from __future__ import annotations

import random

# The statuses that say "not now" rather than "no": a timeout, too early, throttling, a server
# briefly down or overloaded.
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def backoff_seconds(attempt: int, first: float = 0.1, most: float = 2.0) -> float:
    """How long to wait before try ``attempt`` (1, 2...): ``first``, doubling up to ``most``,
    a random share of it (full jitter, so that readers failed together do not return
    together)."""
    return random.uniform(0, min(most, first * 2 ** (attempt - 1)))
