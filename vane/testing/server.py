"""A real OpenAI-compatible HTTP server on 127.0.0.1, for tests of code that prompts or embeds
(vane's own tests and benchmark use it, and so can yours).

It speaks ``/v1/chat/completions`` and ``/v1/embeddings`` (texts as ``input``, images in vLLM's
chat-style ``messages``), answers deterministically (so a test
knows each row's answer), and can be told to misbehave: answer slowly, fail every n-th request
with a status (429 with ``Retry-After``, 500...), stall past the client's timeout, send
malformed JSON, refuse some prompts for good (HTTP 400), answer some structured requests with
JSON that does not fit, or send a scripted reply (any status, headers and body, JSON or not) for
a given prompt or embedded text. It counts requests (per prompt and per text too) and requests
in flight, and keeps the ``image_url`` and ``file`` parts it was sent (an answer says how many
it got).

It also runs OpenAI's Batch API: ``POST /v1/files`` (a JSONL file of requests, purpose
``batch``), ``GET /v1/files/{id}/content``, ``POST /v1/batches`` and ``GET /v1/batches/{id}``.
A batch's time is counted in polls, not seconds, so tests of it are deterministic: it is
``in_progress`` for ``batch_polls`` retrievals, then ends ``completed`` with an output file
(and an error file for the items whose prompt is in ``batch_fail``), or, with
``batch_expire_after=n``, ``expired`` with only its first n items answered and the rest in
the error file as ``batch_expired``. ``GET /v1/batches`` lists them, newest first;
``batch_create_stall`` makes a create hold its reply, its batch made, until it is unset, and
``batch_retrieve_status`` (``batch_upload_status``) fails every retrieval (upload) with that
status. Batch
items are answered as chat requests are, and counted apart (``batch_items``), never in
``requests``.

In a test::

    from vane.testing import OpenAIServer

    server = OpenAIServer().start()       # a free port on 127.0.0.1
    rel.prompt("question", base_url=server.base_url, api_key="any", model="any")
    server.stop()

or as a command: ``python -m vane.testing.server --port 8000 --latency 0.05`` (what
``vane.ai.serve`` tests start; ``--exit-after n`` makes it die after n requests, and
``--hang-after n`` hang, alive and silent; ``--hold`` holds every request, unanswered, until
``POST /release``), or as a
server function: ``vane.ai.serve(function=vane.testing.server.run)``. Besides the API it
answers ``GET /health`` and ``GET /v1/models`` (200 once serving) and ``GET /stats`` (its
request counts, by prompt, text and client (User-Agent), its process id and
``CUDA_VISIBLE_DEVICES``, as JSON). It needs the ``openai`` extra (``aiohttp``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from collections import Counter
from typing import Any

from vane.errors import MissingDependencyError

try:
    from aiohttp import web
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingDependencyError(
        "vane.testing.OpenAIServer needs aiohttp: pip install 'vane-data[openai]'"
    ) from exc

from vane.testing.batches import BatchApi
from vane.testing.replies import (
    Behaviour,
    Scripted,
    answer_for,
    file_parts,
    fill,
    image_urls,
    label_for_images,
    message_text,
    vector_for,
)

__all__ = [
    "Behaviour",
    "OpenAIServer",
    "Scripted",
    "answer_for",
    "label_for_images",
    "run",
    "vector_for",
]


class OpenAIServer(BatchApi):
    """The server; ``start()`` runs it on a thread of this process, ``stop()`` ends it."""

    def __init__(
        self, behaviour: Behaviour | None = None, port: int = 0, host: str = "127.0.0.1"
    ) -> None:
        self.behaviour = behaviour or Behaviour()
        self.port = port
        self.host = host
        self.requests = 0
        self.by_prompt: Counter[str] = Counter()
        self.by_text: Counter[str] = Counter()  # texts sent to /embeddings, each time sent
        self.image_urls: list[str] = []  # the image_url parts of chat messages, as sent
        self.files: list[dict[str, Any]] = []  # their file parts' "file" objects, as sent
        self.by_client: Counter[str] = Counter()  # requests by the client's User-Agent
        self.arrivals: list[float] = []
        self.batches: dict[str, dict[str, Any]] = {}  # the Batch API's batches, by id
        self.uploads: dict[str, bytes] = {}  # files, by id: uploaded, and the batches' results
        self.batch_items: Counter[str] = Counter()  # prompts answered in batches, each time
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._gate: asyncio.Event | None = None  # opened by POST /release (Behaviour.hold)

    def reset(self, behaviour: Behaviour | None = None) -> None:
        """Forget every request counted so far, and take ``behaviour`` (else a plain one)."""
        with self._lock:
            self.behaviour = behaviour or Behaviour()
            self.requests = 0
            self.by_prompt.clear()
            self.by_text.clear()
            self.image_urls.clear()
            self.files.clear()
            self.by_client.clear()
            self.arrivals.clear()
            self.batches.clear()
            self.uploads.clear()
            self.batch_items.clear()
            self.max_in_flight = self.in_flight
        if self._loop is not None and self._gate is not None:  # held again, if told to hold
            self._loop.call_soon_threadsafe(self._gate.clear)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # ---- behaviour ---------------------------------------------------------------------------

    async def _misbehave(self, number: int) -> web.Response | None:
        b = self.behaviour
        if b.hold:
            assert self._gate is not None
            await self._gate.wait()
        if b.latency:
            await asyncio.sleep(b.latency)
        if b.fail_every and number % b.fail_every == 0:
            headers = {"Retry-After": b.retry_after} if b.retry_after else {}
            body = {"error": {"message": f"injected {b.fail_status}", "type": "injected"}}
            return web.json_response(body, status=b.fail_status, headers=headers)
        if b.stall_every and number % b.stall_every == 0:
            await asyncio.sleep(b.stall_seconds)
        if b.malformed_every and number % b.malformed_every == 0:
            return web.Response(text='{"choices": [', content_type="application/json")
        return None

    def _scripted(self, keys: list[Any]) -> web.Response | None:
        """The scripted reply for the first of ``keys`` that has one still due, if any."""
        for key in keys:
            with self._lock:
                scripted = self.behaviour.scripted.get(key) if isinstance(key, str) else None
                if scripted is None or scripted.times == 0:
                    continue
                if scripted.times is not None:
                    scripted.times -= 1
            body = scripted.body
            if isinstance(body, str):
                body = body.encode()
            elif not isinstance(body, bytes):
                body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **scripted.headers}
            return web.Response(body=body, status=scripted.status, headers=headers)
        return None

    def _count(self, prompt: str | None, request: web.Request) -> int:
        with self._lock:
            self.by_client[request.headers.get("User-Agent", "")] += 1
            if self.behaviour.exit_after and self.requests >= self.behaviour.exit_after:
                os._exit(3)  # a server that dies with requests in flight
            if self.behaviour.hang_after and self.requests >= self.behaviour.hang_after:
                time.sleep(10**6)  # the event loop stops: alive, answering nothing
            self.requests += 1
            self.arrivals.append(time.monotonic())
            if prompt is not None:
                self.by_prompt[prompt] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.requests

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = message_text(body["messages"][-1]["content"])
        images = image_urls(body["messages"][-1]["content"])
        number = self._count(prompt, request)
        files = file_parts(body["messages"][-1]["content"])
        with self._lock:
            self.image_urls.extend(images)
            self.files.extend(files)
        try:
            refusal = await self._misbehave(number) or self._scripted([prompt])
            if refusal is not None:
                return refusal
            if prompt in self.behaviour.refuse:
                error = {"error": {"message": f"refused: {prompt}", "type": "invalid_request"}}
                return web.json_response(error, status=400)
            return web.json_response(self._completion(body, prompt, images, files, number))
        finally:
            self._done()

    def _completion(
        self, body: Any, prompt: str, images: list[str], files: list[Any], number: int
    ) -> dict[str, Any]:
        """The chat completion for ``prompt``: what a live request and a batch item get."""
        content = self._content(prompt, body.get("response_format"), images)
        if images and not body.get("response_format"):
            content += f" (with {len(images)} image{'s' if len(images) > 1 else ''})"
        if files and not body.get("response_format"):
            content += f" (with {len(files)} file{'s' if len(files) > 1 else ''})"
        words = len(prompt.split())
        return {
            "id": f"chat-{number}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": words, "completion_tokens": words + 2},
        }

    def _content(self, prompt: str, response_format: Any, images: list[str] | None = None) -> str:
        if not response_format:
            return answer_for(prompt)
        schema = response_format["json_schema"]["schema"]
        if prompt in self.behaviour.misfit:
            return json.dumps({"unexpected": True})
        return json.dumps(fill(schema, prompt, images or []))

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:  # vLLM's form for images: see chat_embedding below
            return await chat_embedding(self, body, request)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        number = self._count(None, request)
        with self._lock:
            self.by_text.update(t for t in texts if isinstance(t, str))
        try:
            refusal = await self._misbehave(number) or self._scripted(texts)
            if refusal is not None:
                return refusal
            size = body.get("dimensions") or self.behaviour.embedding_size
            data = [
                {"object": "embedding", "index": i, "embedding": vector_for(t, size)}
                for i, t in enumerate(texts)
            ]
            usage = {"prompt_tokens": sum(len(t.split()) for t in texts)}
            return web.json_response({"object": "list", "data": data, "usage": usage})
        finally:
            self._done()

    async def release(self, request: web.Request) -> web.Response:
        """Answer every request held (``Behaviour.hold``), and from now on hold none."""
        assert self._gate is not None
        self._gate.set()
        return web.json_response({"released": True})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "test", "object": "model"}]})

    async def stats(self, request: web.Request) -> web.Response:
        """What this process received: a test that runs the server as a command reads it."""
        with self._lock:
            body = {
                "pid": os.getpid(),
                "requests": self.requests,
                "by_prompt": dict(self.by_prompt),
                "by_text": dict(self.by_text),
                "by_client": dict(self.by_client),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "batches": len(self.batches),
                "batch_items": dict(self.batch_items),
            }
        return web.json_response(body)

    # ---- running -------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/v1/files", self.upload)
        app.router.add_get("/v1/files/{file_id}/content", self.file_content)
        app.router.add_post("/v1/batches", self.create_batch)
        app.router.add_get("/v1/batches/{batch_id}", self.retrieve_batch)
        app.router.add_get("/v1/batches", self.list_batches)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/release", self.release)
        return app

    def start(self) -> OpenAIServer:
        self._thread = threading.Thread(
            target=self._serve, daemon=True, name="vane-test-openai-server"
        )
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the OpenAI-compatible test server did not start within 30 s")
        return self

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._gate = asyncio.Event()
        runner = web.AppRunner(self._app(), access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, self.host, self.port, backlog=1024)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def stop(self) -> None:
        if self._loop is not None and not self._loop.is_closed():  # a second stop: done
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)


def run(
    port: int,
    *,
    latency: float = 0.0,
    host: str = "127.0.0.1",
    exit_after: int = 0,
    hang_after: int = 0,
    hold: bool = False,
) -> None:
    """Serve on ``port`` until the process is ended: the server as a command does, and as a
    server function (``vane.ai.serve(function=run)``) in a process of its own."""
    behaviour = Behaviour(latency=latency, exit_after=exit_after, hang_after=hang_after, hold=hold)
    server = OpenAIServer(behaviour, port=port, host=host).start()
    print(f"serving {server.base_url} (pid {os.getpid()})", flush=True)
    try:
        threading.Event().wait()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--exit-after", type=int, default=0, help="die on request n+1")
    parser.add_argument("--hang-after", type=int, default=0, help="hang on request n+1")
    parser.add_argument(
        "--hold", action="store_true", help="hold every request until POST /release"
    )
    args = parser.parse_args()
    run(
        args.port,
        latency=args.latency,
        host=args.host,
        exit_after=args.exit_after,
        hang_after=args.hang_after,
        hold=args.hold,
    )


async def chat_embedding(
    server: OpenAIServer, body: dict[str, Any], request: web.Request
) -> web.Response:
    """``/v1/embeddings`` in vLLM's chat-style form (``messages`` instead of ``input``): one
    embedding of the last message, ``vector_for`` its text followed by its image URLs; the
    images are kept in ``server.image_urls``, the text counted in ``by_text``."""
    content = body["messages"][-1]["content"]
    text, images = str(message_text(content)), image_urls(content)
    number = server._count(None, request)
    with server._lock:
        server.image_urls.extend(images)
        server.by_text[text] += 1
    try:
        refusal = await server._misbehave(number) or server._scripted([text, *images])
        if refusal is not None:
            return refusal
        size = body.get("dimensions") or server.behaviour.embedding_size
        data = [
            {
                "object": "embedding",
                "index": 0,
                "embedding": vector_for(text + "".join(images), size),
            }
        ]
        usage = {"prompt_tokens": len(text.split()) + 10 * len(images)}
        return web.json_response({"object": "list", "data": data, "usage": usage})
    finally:
        server._done()


if __name__ == "__main__":
    main()
