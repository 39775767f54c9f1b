"""When an HTTP read is worth asking again, and how long to wait first: shared by the reads of
fsspec objects (``io/storage.py``) and ``download_url``'s GETs (``functions/_urls.py``). (The AI
providers follow the OpenAI client's own rules instead: ``ai/limits.py``.)"""

from __future__ import annotations

import random

# The statuses that say "not now" rather than "no": a timeout, too early, throttling, a server
# briefly down or overloaded.
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


# TLS failures that asking again does not mend: a certificate refused, or a handshake that
# failed otherwise than by the connection's dropping (a server that does not speak TLS on that
# port, no protocol or cipher in common). Known by name, so that this module imports neither
# aiohttp nor ssl. A handshake cut short (an EOF, a reset: a busy proxy or load balancer) is
# worth a retry like any dropped connection.
_CERTIFICATE = frozenset({"ClientConnectorCertificateError", "SSLCertVerificationError"})
_TLS = frozenset({"ClientSSLError", "SSLError"})
_CUT_SHORT = frozenset({"SSLEOFError", "SSLZeroReturnError", "SSLSyscallError"})


def lasting(exc: BaseException) -> bool:
    """Whether ``exc`` is a TLS failure that will fail the same way when asked again."""
    names = _names(exc)
    if names & _CERTIFICATE:
        return True
    if not names & _TLS:
        return False
    # aiohttp wraps the ssl module's error (``os_error``, and as the cause)
    inner = getattr(exc, "os_error", None) or exc.__cause__ or exc
    return not (_names(inner) | names) & _CUT_SHORT


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def backoff_seconds(attempt: int, first: float = 0.1, most: float = 2.0) -> float:
    """How long to wait before try ``attempt`` (1, 2...): ``first``, doubling up to ``most``,
    a random share of it (full jitter, so that readers failed together do not return
    together)."""
    return random.uniform(0, min(most, first * 2 ** (attempt - 1)))
