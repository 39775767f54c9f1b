"""A store's failures as vane errors: each names the URL and what to check (the bucket, the
endpoint, the credentials vane found), and none holds a credential (``scrub``)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any, Protocol

from vane.errors import StorageAccessError, StorageError, StorageNotFoundError, VaneError

# A store's options as a hashable, ordered value: ((name, value), ...).
Frozen = tuple[tuple[str, Any], ...]
_SECRET_NAMES = ("secret_key", "session_token", "access_key", "secret", "token", "key", "password")
# Each request is tried this many times in all (the AWS SDK's standard strategy: throttling
# such as 503 SlowDown, 5xx, resets and timeouts, with exponential backoff and jitter).
S3_ATTEMPTS = 5
# How long a connection to S3, then each request, may take before it is tried again.
S3_CONNECT_TIMEOUT = 10.0
S3_REQUEST_TIMEOUT = 60.0


class Located(Protocol):
    """What an error needs of the store it came from (``storage.Store``)."""

    @property
    def protocol(self) -> str: ...
    @property
    def options(self) -> Frozen: ...
    def scrub(self, text: str) -> str: ...


_NOT_FOUND_BUCKET = re.compile(r"NO_SUCH_BUCKET|NoSuchBucket|bucket does not exist", re.I)
_NOT_FOUND = re.compile(r"NO_SUCH_KEY|NoSuchKey|Path does not exist|not found|\b404\b", re.I)
_ACCESS = re.compile(
    # pyarrow names AWS errors in capitals (INVALID_ACCESS_KEY_ID), botocore as AWS does
    r"ACCESS_DENIED|AccessDenied|InvalidAccessKeyId|INVALID_ACCESS_KEY_ID|"
    r"SignatureDoesNotMatch|SIGNATURE_DOES_NOT_MATCH|Forbidden|\b403\b|"
    r"ExpiredToken|InvalidToken|No response body|credentials",
    re.I,
)
_UNREACHABLE = re.compile(
    r"NETWORK_CONNECTION|Couldn't connect|Could not connect|Connection refused|"
    r"Failed to connect|Name or service not known|Resolving timed out|timed out",
    re.I,
)


def scrub(text: str, options: Frozen) -> str:
    """``text`` without any credential value from ``options`` in it."""
    for name, value in options:
        if isinstance(value, str) and len(value) >= 4 and name in _SECRET_NAMES:
            text = text.replace(value, "***")
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def translate(exc: BaseException, where: str, action: str, store: Located | None) -> VaneError:
    """``exc`` (an OSError from pyarrow, an fsspec or botocore error) as a vane error naming
    ``where`` and what to check, with no credential in it."""
    text = " ".join(str(exc).split())
    text = store.scrub(text) if store is not None else scrub(text, ())
    if len(text) > 400:
        text = text[:397] + "..."
    bucket = where.split("://", 1)[-1].split("/", 1)[0]
    endpoint = _endpoint(store)
    kind = _kind(exc, _without_names(text, where))
    if kind == "no-bucket":
        return StorageNotFoundError(
            f"{action} {where}: the bucket {bucket!r} does not exist{endpoint}. Check the "
            f"bucket's name, and the endpoint (AWS_ENDPOINT_URL or storage_options="
            f"{{'endpoint_url': ...}}) if it lives elsewhere than AWS ({text})"
        )
    if kind == "refused":
        return StorageAccessError(
            f"{action} {where}: the store refused the request{endpoint}. Check the credentials "
            "vane found (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE, or "
            "storage_options={'key': ..., 'secret': ...}), that they are not expired, and that "
            f"they may access {bucket!r} ({text})"
        )
    if kind == "missing":
        return StorageNotFoundError(f"{action} {where}: no such object ({text})")
    if kind == "unreachable":
        attempts = dict(store.options).get("max_attempts", S3_ATTEMPTS) if store else S3_ATTEMPTS
        if isinstance(exc, TimeoutError):
            text = text or "no answer within its timeout"
            hint = (
                "Check the endpoint and the network, or allow a slow store longer "
                "(storage_options request_timeout / connect_timeout, in seconds)"
            )
        else:
            hint = "Check the endpoint and the network"
        return StorageError(
            f"{action} {where}: the store could not be reached{endpoint} after "
            f"{attempts} attempts. {hint} ({text})"
        )
    return StorageError(f"{action} {where} failed after vane's retries: {text}")


# aiohttp's (fsspec's HTTP filesystem raises them as they are) for a host that cannot be
# connected to or that stops answering; not its TLS failures, which say more as they are.
_AIOHTTP_UNREACHABLE = ("ClientConnectorError", "ServerDisconnectedError", "ServerTimeoutError")


def _kind(exc: BaseException, text: str) -> str:
    """What went wrong: the exception's type or the store's error code first, then its words.
    ``text`` has no URL, bucket or key in it, so that a name never decides: a bucket called
    ``b-233c4039d4`` holds "403" but an endpoint that cannot be reached is still unreachable."""
    code, status = _client_error(exc)
    if type(exc).__module__.startswith("botocore") and _is_named(exc, *_BOTOCORE_UNREACHABLE):
        return "unreachable"
    if code == "NoSuchBucket" or _NOT_FOUND_BUCKET.search(text):
        return "no-bucket"
    if status == 403 or isinstance(exc, PermissionError):
        return "refused"
    if code in ("NoSuchKey", "NotFound") or isinstance(exc, FileNotFoundError):
        return "missing"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return "unreachable"
    if _is_named(exc, *_AIOHTTP_UNREACHABLE) and not _is_named(exc, "ClientSSLError"):
        return "unreachable"
    if _ACCESS.search(text):
        return "refused"
    if _NOT_FOUND.search(text) or status == 404:
        return "missing"
    if _UNREACHABLE.search(text):
        return "unreachable"
    return "other"


def _client_error(exc: BaseException) -> tuple[str, int | None]:
    """A botocore ClientError's error code and HTTP status ("", None for any other error)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", None
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status if isinstance(status, int) else None


# EndpointConnectionError, ConnectTimeoutError and ProxyConnectionError are ConnectionErrors.
_BOTOCORE_UNREACHABLE = ("ConnectionError", "ReadTimeoutError", "ConnectionClosedError")


def _is_named(exc: BaseException, *names: str) -> bool:
    return any(cls.__name__ in names for cls in type(exc).__mro__)


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)


def _without_names(text: str, where: str) -> str:
    """``text`` with the URLs, the bucket and the key taken out: what is left is the store's
    words, whose codes say what happened."""
    text = _URL.sub(" ", text)
    path = where.split("://", 1)[-1]
    parts = sorted({path, path.strip("/"), *path.split("/")} - {""}, key=len, reverse=True)
    for part in parts:  # whole names only: a key "s" must not take the s out of "Access"
        text = re.sub(rf"(?<![\w.-]){re.escape(part)}(?![\w.-])", " ", text)
    return text


def _endpoint(store: Located | None) -> str:
    if store is None or store.protocol != "s3":
        return ""
    given = dict(store.options).get("endpoint_url") or os.environ.get(
        "AWS_ENDPOINT_URL_S3", os.environ.get("AWS_ENDPOINT_URL", "")
    )
    return f" (endpoint {given})" if given else ""


@contextlib.contextmanager
def storage_errors(where: str, action: str, store: Located | None = None) -> Iterator[None]:
    """Run a storage request; its failure becomes a ``StorageError`` naming ``where``. The
    third-party error's text is in the message; its traceback (the SDK's internals) is not
    chained, as the user can act on the message alone."""
    try:
        yield
    except VaneError:
        raise
    except (OSError, ValueError) as exc:
        raise translate(exc, where, action, store) from None
    except Exception as exc:  # botocore, aiohttp...: the third-party tree stops here
        if type(exc).__module__.split(".")[0] in _STORE_LIBRARIES:
            raise translate(exc, where, action, store) from None
        raise


# The libraries whose errors a store's request may raise: their text (which may hold a token)
# is scrubbed into a vane error, their traceback left out.
_STORE_LIBRARIES = frozenset(
    {
        "botocore",
        "aiobotocore",
        "s3fs",
        "aiohttp",
        "fsspec",
        "requests",
        "gcsfs",
        "google",
        "adlfs",
        "azure",
        "huggingface_hub",
    }
)
