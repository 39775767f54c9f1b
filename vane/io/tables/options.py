"""``storage_options`` as each table format's library takes them, from vane's spelling: the one
place where vane's names become Lance's, delta-rs's and pyiceberg's.

Users write the same options for ``read_parquet`` and ``write_lance`` (pandas', Polars' and
fsspec's names: ``key``, ``secret``, ``endpoint_url``, ``region``...; ``storage.py`` lists
them), merged over ``vane.configure(storage_options=...)``. Each library spells them its own
way, and each misses something vane honours:

    vane            Lance and delta-rs (Rust object_store)   pyiceberg (pyarrow's S3 FileIO)
    key             aws_access_key_id                        s3.access-key-id
    secret          aws_secret_access_key                    s3.secret-access-key
    token           aws_session_token                        s3.session-token
    endpoint_url    aws_endpoint (+ allow_http for http://)  s3.endpoint
    region          aws_region                               s3.region
    anon            aws_skip_signature                       s3.anonymous
    connect_timeout connect_timeout ("10s")                  s3.connect-timeout
    request_timeout timeout ("60s")                          s3.request-timeout

``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (the SDKs' variables for S3-compatible stores)
become the endpoint when no option gives one: pyiceberg does not read them, and object_store
refuses an ``http://`` endpoint unless told ``allow_http``. Behind an endpoint, with no region
given, the region is ``AWS_REGION`` or ``AWS_DEFAULT_REGION`` or else ``us-east-1``, as vane's
own S3 filesystem takes it, and always stated: pyiceberg would otherwise ask AWS where the
bucket lives (an S3-compatible store has no AWS region; the lookup took 8 s to fail here).
Credentials found in the environment are not copied: each library reads the AWS chain itself.
``max_attempts`` has no equivalent and is dropped (each library retries by its own rules).
An option vane does not know goes to the library unchanged, so the library's own spelling
(``aws_endpoint``, ``s3.proxy-uri``) still works. Other protocols (``gs://``, ``az://``...)
get the options as given.

The other way, ``in_vane_spelling`` reads options written for Lance's and delta-rs's
object_store (any case, its aliases: ``AWS_ENDPOINT_URL``, ``aws_endpoint``, ``allow_http``,
``timeout="60s"``...) as vane's, so that vane's own S3 filesystem (Arrow's, in C++) can read
a table's files whichever spelling the user brought.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from vane.errors import ConfigurationError
from vane.io.storage import (
    canonical_s3_option,
    flag_of,
    is_s3_option,
    options_for,
    protocol_of,
    seconds_of,
)
from vane.io.tables.base import check_storage_options

Library = Literal["lance", "delta", "iceberg"]

_OBJECT_STORE = {
    "access_key": "aws_access_key_id",
    "secret_key": "aws_secret_access_key",
    "session_token": "aws_session_token",
    "endpoint_url": "aws_endpoint",
    "region": "aws_region",
    "anonymous": "aws_skip_signature",
    "connect_timeout": "connect_timeout",
    "request_timeout": "timeout",
}
_PYICEBERG = {
    "access_key": "s3.access-key-id",
    "secret_key": "s3.secret-access-key",
    "session_token": "s3.session-token",
    "endpoint_url": "s3.endpoint",
    "region": "s3.region",
    "anonymous": "s3.anonymous",
    "connect_timeout": "s3.connect-timeout",
    "request_timeout": "s3.request-timeout",
}
_SECONDS = ("connect_timeout", "request_timeout")


def library_options(
    caller: str, url: str | None, given: Mapping[str, Any] | None, library: Library
) -> dict[str, str] | None:
    """The options ``library`` is given for ``url`` (None: the library's defaults). ``url`` is
    the table's location (Iceberg: the catalog's warehouse; None when it has none)."""
    if given is not None and not isinstance(given, Mapping):
        check_storage_options(caller, given)  # raises, naming the shape expected
    protocol = protocol_of(url) if url else None
    if protocol not in ("s3", "s3a"):
        return check_storage_options(caller, given) or None
    one_spelling(caller, given)
    theirs = {k: v for k, v in (given or {}).items() if not is_s3_option(k)}
    ours = {k: v for k, v in (given or {}).items() if is_s3_option(k)}
    resolved = dict(options_for("s3", ours, caller))
    resolved.pop("max_attempts", None)
    endpoint = resolved.get("endpoint_url") or (
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        resolved["endpoint_url"] = str(endpoint)
        if not resolved.get("region"):
            resolved["region"] = (
                os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            )
    names = _PYICEBERG if library == "iceberg" else _OBJECT_STORE
    out: dict[str, str] = {}
    for name, value in resolved.items():  # (checked and typed by options_for)
        if name == "anonymous":
            if value:
                out[names[name]] = "true"
        elif name in _SECONDS:
            # (every digit: ``:g`` kept six, so 123.4567 s reached the library as 123.457 s)
            number = repr(int(value) if float(value).is_integer() else float(value))
            out[names[name]] = f"{number}s" if library != "iceberg" else number
        else:
            out[names[name]] = str(value)
    if library != "iceberg" and str(endpoint or "").startswith("http://"):
        out["allow_http"] = "true"
    out.update(check_storage_options(caller, theirs) or {})
    return out or None


# object_store's names (lower case) for what vane's S3 options say, beyond those vane also
# takes itself (``aws_access_key_id``, ``aws_region``, ``endpoint``...: ``storage.py``).
_FROM_OBJECT_STORE = {
    "access_key_id": "key",
    "secret_access_key": "secret",
    "aws_token": "token",
    "aws_endpoint": "endpoint_url",
    "aws_default_region": "region",
    "default_region": "region",
    "aws_skip_signature": "anon",
    "skip_signature": "anon",
    "timeout": "request_timeout",
    "aws_timeout": "request_timeout",
    "aws_connect_timeout": "connect_timeout",
}
# object_store's options that change nothing a read of S3 objects gets: how to reach an http://
# endpoint (the endpoint's own scheme says it to vane's filesystem) and how writers commit.
_NOT_FOR_READS = frozenset(
    {
        "allow_http",
        "aws_allow_http",
        "aws_s3_allow_unsafe_rename",
        "aws_conditional_put",
        "conditional_put",
        "aws_copy_if_not_exists",
        "copy_if_not_exists",
        "aws_s3_locking_provider",
    }
)


def _canonical(key: str) -> str | None:
    """The option ``key`` names in vane's own terms (``access_key``, ``endpoint_url``...),
    whichever spelling and case it is in; None for one vane has no name for."""
    for name in (key, key.lower()):
        if is_s3_option(name) and name != "client_kwargs":
            return canonical_s3_option(name)
    vane_name = _FROM_OBJECT_STORE.get(key.lower())
    return canonical_s3_option(vane_name) if vane_name else None


def one_spelling(caller: str, given: Mapping[str, Any] | None) -> None:
    """A ``ConfigurationError`` if ``given`` says one S3 option twice, in two spellings or
    cases, with different values (``endpoint_url`` and ``aws_endpoint``): the library and
    vane's own filesystem might each take another, and send the credentials elsewhere."""
    said: dict[str, tuple[str, Any]] = {}
    for key, value in (given or {}).items():
        name = _canonical(key) if isinstance(key, str) else None
        if name is None:
            continue
        if name in said and str(said[name][1]) != str(value):
            raise ConfigurationError(
                f"{caller}(): storage_options gives the {name} twice, as {said[name][0]!r} and "
                f"{key!r}, with different values; give it once"
            )
        said.setdefault(name, (key, value))


def in_vane_spelling(caller: str, given: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """S3 ``storage_options`` in object_store's spelling (or vane's, or both) as vane spells
    them, for a read through vane's own filesystem; None when one of them has no equivalent
    there (a proxy, a client certificate...), and only the library can take them. An option
    said twice with different values is refused (``one_spelling``)."""
    one_spelling(caller, given)
    out: dict[str, Any] = {}
    for key, given_value in (given or {}).items():
        name = "client_kwargs" if key == "client_kwargs" else _canonical(key)
        if name is None:
            if key.lower() in _NOT_FOR_READS:
                continue
            return None
        value: Any = given_value
        if name == "anonymous":
            value = flag_of(given_value)
            if value is None:  # (neither true nor false: the library's to refuse)
                return None
        elif name in _SECONDS:  # ("10s" as object_store writes it, or a number of seconds)
            value = seconds_of(given_value)
            if value is None:
                return None
        out[name] = value  # (``one_spelling``: any other spelling of it says the same)
    return out
