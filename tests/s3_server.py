"""An S3-compatible server on 127.0.0.1 for the tests (moto's server, a real HTTP server), with
the standard variables every S3 client reads pointed at it while it runs."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request as the S3 server saw it."""

    method: str
    path: str  # /bucket/key
    query: str

    @property
    def kind(self) -> str:
        """LIST (a bucket listing), HEAD, GET (an object), PUT, POST or DELETE."""
        key = self.path.strip("/").partition("/")[2]
        if self.method == "GET" and not key and "location" not in self.query:
            return "LIST"
        return self.method


def _recording(app: Any, requests: list[Request]) -> Any:
    def recorded(environ: dict[str, Any], start_response: Any) -> Any:
        requests.append(
            Request(environ["REQUEST_METHOD"], environ["PATH_INFO"], environ["QUERY_STRING"])
        )
        return app(environ, start_response)

    return recorded


ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")
ACCESS_KEY = "testing"
SECRET_KEY = "testing-secret-value"


@contextlib.contextmanager
def local_s3(*, own_process: bool = False, requests: list[Request] | None = None) -> Iterator[str]:
    """The server's URL, with test credentials and ``AWS_ENDPOINT_URL`` set; all as they were
    once it stops.

    ``requests``: each request the server answers is appended to it, as it arrives (a thread
    server only).

    ``own_process``: the server runs as a process of its own rather than a thread of this one:
    with the server a thread here, delta-rs's writer waited 180 s for its first listing, then
    failed (it seems to keep the interpreter while it waits)."""
    with _server(own_process, requests) as url:
        saved = {k: os.environ.get(k) for k in ENV}
        os.environ.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            AWS_ENDPOINT_URL=url,
            AWS_DEFAULT_REGION="us-east-1",
        )
        try:
            yield url
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@contextlib.contextmanager
def _server(own_process: bool, requests: list[Request] | None) -> Iterator[str]:
    if not own_process:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        if requests is not None:
            served = server._server  # werkzeug's server: each request calls its .app
            served.app = _recording(served.app, requests)
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not start on port {port}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
