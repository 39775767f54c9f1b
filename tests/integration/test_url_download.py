"""url_download against a real HTTP server on 127.0.0.1: bodies arrive exactly, a 404 is final,
5xx answers and connection resets are retried, a body that never finishes times out, every
failure is its row's (an error naming it, or a null), and no more than ``max_connections``
requests reach one host at once."""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vane
from tests.images import pattern, png_bytes
from vane import functions as F
from vane.errors import ConfigurationError, UDFError
from vane.types.images import to_numpy


@dataclass
class Site:
    """What the server serves and what it saw."""

    url: str
    hits: Counter[str] = field(default_factory=Counter)
    active: int = 0
    most_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)
    pair: threading.Barrier = field(default_factory=lambda: threading.Barrier(2))

    def body(self, name: str) -> bytes:
        return f"body of {name}".encode() * 3


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path
            counted = path.startswith("/pair/")  # the requests whose overlap is measured
            with site.lock:
                site.hits[path] += 1
                hits = site.hits[path]
                site.active += counted
                site.most_active = max(site.most_active, site.active)
            try:
                self._answer(path, hits)
            finally:
                with site.lock:
                    site.active -= counted

        def _answer(self, path: str, hits: int) -> None:
            if path.startswith("/ok/"):
                self._send(200, site.body(path))
            elif path.startswith("/image/"):
                seed = int(path.rsplit("/", 1)[1])
                self._send(200, png_bytes(pattern(3 + seed, 4, seed=seed)))
            elif path.startswith("/missing/"):
                self._send(404, b"no such thing")
            elif path.startswith("/flaky/"):  # fails twice, then answers
                if hits <= 2:
                    self._send(503, b"busy")
                else:
                    self._send(200, site.body(path))
            elif path.startswith("/reset-once/"):  # the connection dies mid-answer once
                if hits == 1:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
                    self.wfile.flush()
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()  # a reset, not a clean close
                    self.close_connection = True
                else:
                    self._send(200, site.body(path))
            elif path.startswith("/stuck/"):  # headers, then a body that never comes
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"x")
                self.wfile.flush()
                site.release.wait(60)
                self.close_connection = True
            elif path.startswith("/pair/"):
                # Two requests must be in flight at once to get past here (the limit allows
                # two); with only one, the barrier breaks and the answer is a 500.
                try:
                    site.pair.wait(timeout=30)
                except threading.BrokenBarrierError:
                    self._send(500, b"alone")
                    return
                self._send(200, site.body(path))
            else:
                self._send(400, b"?")

    return Handler


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Site("")))
    handler_site = Site(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(handler_site)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler_site
    finally:
        handler_site.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _download(urls: list[str | None], **options: object) -> list[dict]:
    rel = vane.from_pydict({"url": urls}).with_column("body", F.url_download("url", **options))
    return rel.to_pylist()


def test_bodies_arrive_exactly_in_row_order(site):
    urls = [f"{site.url}/ok/{i}" for i in range(40)] + [None]
    rows = _download(urls)
    assert [r["body"] for r in rows] == [site.body(f"/ok/{i}") for i in range(40)] + [None]


def test_a_404_fails_its_row_by_name_without_retrying(site):
    urls = [f"{site.url}/ok/a", f"{site.url}/missing/a"]
    with pytest.raises(UDFError, match=r"row 1.*HTTP 404"):
        _download(urls)
    assert site.hits["/missing/a"] == 1
    with pytest.warns(UserWarning, match="kept 1 failing row"):
        rows = _download(urls, on_error="null", error_column="why")
    assert rows[0]["body"] == site.body("/ok/a") and rows[0]["why"] is None
    assert rows[1]["body"] is None and "HTTP 404" in rows[1]["why"]
    assert site.hits["/missing/a"] == 2  # once per run: a 404 is final


def test_5xx_answers_and_resets_are_retried_until_they_answer(site):
    rows = _download([f"{site.url}/flaky/a", f"{site.url}/reset-once/a"], max_retries=3)
    assert [r["body"] for r in rows] == [site.body("/flaky/a"), site.body("/reset-once/a")]
    assert site.hits["/flaky/a"] == 3 and site.hits["/reset-once/a"] == 2
    with pytest.warns(UserWarning, match="failing row"):
        rows = _download([f"{site.url}/flaky/b"], max_retries=1, on_error="null", error_column="w")
    assert rows[0]["body"] is None and "after 2 attempts: HTTP 503" in rows[0]["w"]


def test_a_body_that_never_finishes_times_out_as_its_rows_failure(site):
    with pytest.warns(UserWarning, match="failing row"):
        rows = _download(
            [f"{site.url}/stuck/a", f"{site.url}/ok/b"],
            timeout=0.5,
            max_retries=0,
            on_error="null",
            error_column="why",
        )
    assert rows[0]["body"] is None and "timed out" in rows[0]["why"]
    assert rows[1]["body"] == site.body("/ok/b")


def test_no_more_than_max_connections_reach_one_host(site):
    urls = [f"{site.url}/pair/{i}" for i in range(12)]
    rows = _download(urls, max_connections=2, max_retries=0)
    assert all(r["body"] == site.body(f"/pair/{i}") for i, r in enumerate(rows))
    assert site.most_active == 2  # two at once (the barrier needs them), never more


@settings(max_examples=5)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=6))
def test_downloaded_images_decode_to_the_served_pixels(site, seeds):
    rel = vane.from_pydict({"url": [f"{site.url}/image/{s}" for s in seeds]}).select(
        F.decode_image(F.url_download("url")).alias("image")
    )
    images = to_numpy(rel.to_arrow().column("image"))
    for image, seed in zip(images, seeds, strict=True):
        assert image is not None and np.array_equal(image, pattern(3 + seed, 4, seed=seed))


def test_bad_options_are_refused_with_the_fix():
    with pytest.raises(ConfigurationError, match="max_connections"):
        F.url_download("url", max_connections=0)
    with pytest.raises(ConfigurationError, match="timeout"):
        F.url_download("url", timeout=0)


def test_a_tls_failure_is_final_at_once():
    # An https:// URL whose server does not speak TLS: the handshake fails the same way each
    # time, so the row fails after one attempt rather than max_retries more.
    accepted: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/a"
    try:
        with pytest.warns(UserWarning, match="failing row"):
            rows = _download([url], max_retries=3, on_error="null", error_column="why")
    finally:
        listener.close()
    assert rows[0]["body"] is None
    assert rows[0]["why"].startswith(f"GET {url} failed: "), rows[0]["why"]
    assert len(accepted) == 1
