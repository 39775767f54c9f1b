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
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from vane.io.storage import is_s3_option, options_for, protocol_of
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
    for name, value in resolved.items():
        if name == "anonymous":
            if _true(value):
                out[names[name]] = "true"
        elif name in _SECONDS and library != "iceberg":
            out[names[name]] = f"{float(value):g}s"
        else:
            out[names[name]] = str(value)
    if library != "iceberg" and str(endpoint or "").startswith("http://"):
        out["allow_http"] = "true"
    out.update(check_storage_options(caller, theirs) or {})
    return out or None


def _true(value: object) -> bool:
    return value is True or str(value).lower() in ("1", "true", "yes")
