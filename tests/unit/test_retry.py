"""Which failures are worth asking again (``vane/_retry.py``)."""

from __future__ import annotations

import ssl

import pytest

from vane._retry import backoff_seconds, lasting


def _aiohttp_ssl(inner: OSError) -> BaseException:
    aiohttp = pytest.importorskip("aiohttp")
    from aiohttp.client_reqrep import ConnectionKey

    key = ConnectionKey("h", 443, True, True, None, None, None)
    return aiohttp.ClientConnectorSSLError(key, inner)


@pytest.mark.parametrize(
    ("make", "final"),
    [
        (lambda: ssl.SSLCertVerificationError(1, "certificate verify failed"), True),
        (lambda: ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), True),
        (lambda: _aiohttp_ssl(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER]")), True),
        # a handshake cut short (a busy proxy or load balancer): worth asking again
        (lambda: ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), False),
        (lambda: _aiohttp_ssl(ssl.SSLEOFError(8, "EOF")), False),
        (lambda: ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed"), False),
        (ConnectionResetError, False),
        (TimeoutError, False),
    ],
    ids=[
        "certificate",
        "wrong-version",
        "aiohttp-wrong-version",
        "eof",
        "aiohttp-eof",
        "zero-return",
        "reset",
        "timeout",
    ],
)
def test_only_tls_failures_that_would_fail_again_are_final(make, final):
    assert lasting(make()) is final


def test_backoff_grows_to_its_cap_with_full_jitter():
    for attempt in range(1, 10):
        wait = backoff_seconds(attempt)
        assert 0 <= wait <= min(2.0, 0.1 * 2 ** (attempt - 1))
