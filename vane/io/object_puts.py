"""The three object-store requests the commit protocol needs (``object_commit.py``): a put that
fails if the object exists (``create``: S3's ``If-None-Match: *``, an exclusive open elsewhere),
a plain ``put``, and ``delete`` (S3's batched DeleteObjects, a thousand keys a request). On S3
they go through botocore directly, with one client per endpoint, region and credentials.

It also knows the upload streams this process has open (``opened``, ``finished``): a write's
abort closes its own (``close_open``) before it lists what to remove. A stream left to its
destructor (an interrupt between its open and the close that should have followed) would
complete its upload whenever the traceback that holds it goes: after the abort, leaving an
object behind."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def create(store: Any, fs: pafs.FileSystem, path: str, entry: dict[str, Any]) -> bool:
    """Write ``path`` only if it does not exist; False if another writer's is there."""
    body = json.dumps(entry).encode()
    if store.protocol == "s3":
        return _s3_create(store, path, body)
    import fsspec
    from pyarrow.fs import PyFileSystem

    if isinstance(fs, PyFileSystem):
        inner: fsspec.AbstractFileSystem = fs.handler.fs
        try:
            with inner.open(path, "xb") as handle:
                handle.write(body)
        except FileExistsError:
            return False
        except (NotImplementedError, ValueError):
            # No exclusive create in this filesystem: check, then write (two writers
            # committing at one instant could both take the version; documented).
            if inner.exists(path):
                return False
            inner.pipe_file(path, body)
        return True
    if fs.get_file_info(path).size is not None:
        return False
    with fs.open_output_stream(path) as handle:
        handle.write(body)
    return True


# botocore clients, by endpoint, region, credentials and settings (thread-safe).
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def s3_client(store: Any) -> Any:
    """A botocore client for ``store``'s endpoint, region, credentials, timeouts and retries
    (one per process): for the requests pyarrow's S3 filesystem cannot send (a conditional
    put) or sends with more requests than needed (a ranged read of an object whose size a
    listing gave: pyarrow asks the size again, a HEAD request per open)."""
    from vane._deps import require

    require("botocore", extra="s3")
    import botocore.session

    from vane.io.storage_errors import S3_ATTEMPTS, S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT

    options = dict(store.options)
    endpoint = options.get("endpoint_url") or (
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    settings = (
        endpoint or None,
        options.get("region")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or "us-east-1",
        options.get("access_key"),
        options.get("secret_key"),
        options.get("session_token"),
        bool(options.get("anonymous")),
        int(options.get("max_attempts", S3_ATTEMPTS)),
        float(options.get("connect_timeout", S3_CONNECT_TIMEOUT)),
        float(options.get("request_timeout", S3_REQUEST_TIMEOUT)),
    )
    # Not the client's settings, but what it was made under: the credentials botocore found
    # in the environment then, and this process (a forked child makes its own connections).
    made_under = (os.getpid(), *(os.environ.get(name) for name in _CREDENTIALS))
    key = settings + made_under
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            # Creating a client loads botocore's service description (~0.1 s): once per
            # process and store, not once per commit.
            import botocore.config

            endpoint_url, region, key_id, secret, token, anonymous, attempts, connect, read = (
                settings
            )
            config = botocore.config.Config(
                retries={"max_attempts": attempts, "mode": "standard"},
                connect_timeout=connect,
                read_timeout=read,
                max_pool_connections=16,  # DuckDB's threads read objects at once
                **({"signature_version": botocore.UNSIGNED} if anonymous else {}),
            )
            client = botocore.session.get_session().create_client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                aws_access_key_id=key_id,
                aws_secret_access_key=secret,
                aws_session_token=token,
                config=config,
            )
            _CLIENTS[key] = client
    return client


_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def _s3_create(store: Any, path: str, body: bytes) -> bool:
    """A put with ``If-None-Match: *`` (S3 and compatible stores since 2024): the store
    refuses it if the key exists. pyarrow's S3 filesystem cannot send it; botocore can."""
    from botocore.exceptions import ClientError

    client = s3_client(store)
    bucket, _, key = path.partition("/")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
            return False
        raise
    return True


_DELETE_BATCH = 1000  # S3's DeleteObjects takes at most this many keys


# Upload streams open in this process: id -> (path, stream).
_open: dict[int, tuple[str, Any]] = {}
_open_lock = threading.Lock()


def opened(path: str, stream: Any) -> None:
    with _open_lock:
        _open[id(stream)] = (path, stream)


def finished(stream: Any) -> None:
    with _open_lock:
        _open.pop(id(stream), None)


def close_open(token: str) -> None:
    """Close (which completes) the upload streams still open whose path holds ``token``: one
    write's, so that its abort then finds and removes their objects."""
    with _open_lock:
        mine = [(k, s) for k, (path, s) in _open.items() if token in path]
        for key, _ in mine:
            del _open[key]
    for _, stream in mine:
        with contextlib.suppress(Exception):  # a stream that fails to close uploaded nothing
            stream.close()


def delete(store: Any, fs: pafs.FileSystem, paths: list[str]) -> None:
    """Remove ``paths``, best effort (what is left, the next write removes). On S3 one
    DeleteObjects request per thousand keys: pyarrow's ``delete_file`` makes three requests per
    object (it checks the object, deletes it, and puts a marker for the emptied directory)."""
    if not paths:
        return
    if store.protocol == "s3":
        client = s3_client(store)
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, _, key = path.partition("/")
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), _DELETE_BATCH):
                batch = [{"Key": k} for k in keys[start : start + _DELETE_BATCH]]
                with contextlib.suppress(Exception):  # botocore's errors: tidying up only
                    client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        return
    for path in paths:
        with contextlib.suppress(OSError):  # another writer's clean removed it first
            fs.delete_file(path)


def put(store: Any, fs: pafs.FileSystem, path: str, body: bytes) -> None:
    """Write a small object: on S3 one PutObject (pyarrow's output stream makes a multipart
    upload of three requests even for a few bytes)."""
    if store.protocol == "s3":
        bucket, _, key = path.partition("/")
        s3_client(store).put_object(Bucket=bucket, Key=key, Body=body)
        return
    with fs.open_output_stream(path) as handle:
        handle.write(body)
