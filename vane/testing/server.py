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
import hashlib
import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from vane.errors import MissingDependencyError

try:
    from aiohttp import web
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingDependencyError(
        "vane.testing.OpenAIServer needs aiohttp: pip install 'vane-data[openai]'"
    ) from exc


@dataclass
class Behaviour:
    latency: float = 0.0
    fail_every: int = 0  # every n-th request fails with fail_status (0: never)
    fail_status: int = 429
    retry_after: str | None = None
    stall_every: int = 0  # every n-th request waits stall_seconds before answering
    stall_seconds: float = 5.0
    malformed_every: int = 0  # every n-th reply is not JSON
    refuse: set[str] = field(default_factory=set)  # prompts answered with HTTP 400, always
    misfit: set[str] = field(default_factory=set)  # prompts whose structured answer misfits
    embedding_size: int = 8
    # prompt (or, for /embeddings, any text of the request) -> the reply to send instead
    scripted: dict[str, Scripted] = field(default_factory=dict)
    exit_after: int = 0  # the process exits (code 3) on request n+1, unanswered (0: never)
    hang_after: int = 0  # the server stops answering anything, health included, on request n+1
    # The Batch API: how many retrievals see a batch in progress before it ends; prompts whose
    # batch items fail (HTTP 500 in the error file); expiry with only the first n items answered.
    batch_polls: int = 1
    batch_fail: set[str] = field(default_factory=set)
    batch_expire_after: int | None = None
    batch_create_stall: bool = False  # a create, its batch made, replies once this is False
    batch_retrieve_status: int | None = None  # a batch's retrievals fail with this status
    batch_upload_status: int | None = None  # file uploads fail with this status
    hold: bool = False  # every API request waits, unanswered, until POST /release


@dataclass
class Scripted:
    """A reply sent as it is: ``body`` is JSON-encoded unless it is ``str`` or ``bytes`` (sent
    raw); ``times`` is how many requests get it before the prompt is answered as usual (None:
    every one)."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    times: int | None = None


def answer_for(prompt: str) -> str:
    return f"answer to: {prompt}"


def vector_for(text: str, size: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255.0 for i in range(size)]


class OpenAIServer:
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
        prompt = _text(body["messages"][-1]["content"])
        images = _image_urls(body["messages"][-1]["content"])
        number = self._count(prompt, request)
        files = _file_parts(body["messages"][-1]["content"])
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
        return json.dumps(_fill(schema, prompt, images or []))

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

    # ---- the Batch API ---------------------------------------------------------------------

    def _new_file(self, data: bytes, prefix: str = "file") -> str:
        with self._lock:
            file_id = f"{prefix}-{len(self.uploads) + 1}"
            self.uploads[file_id] = data
        return file_id

    @staticmethod
    def _file_object(file_id: str, data: bytes, purpose: str) -> dict[str, Any]:
        return {"id": file_id, "object": "file", "bytes": len(data), "purpose": purpose}

    async def upload(self, request: web.Request) -> web.Response:
        if self.behaviour.batch_upload_status is not None:
            injected = {"error": {"message": "injected", "type": "injected"}}
            return web.json_response(injected, status=self.behaviour.batch_upload_status)
        form = await request.post()
        upload, purpose = form.get("file"), form.get("purpose")
        if purpose != "batch" or not isinstance(upload, web.FileField):
            error = {"message": "send a file and purpose=batch as multipart/form-data"}
            return web.json_response({"error": error}, status=400)
        data = upload.file.read()
        return web.json_response(self._file_object(self._new_file(data), data, "batch"))

    async def file_content(self, request: web.Request) -> web.Response:
        data = self.uploads.get(request.match_info["file_id"])
        if data is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    async def create_batch(self, request: web.Request) -> web.Response:
        body = await request.json()
        if (
            body.get("input_file_id") not in self.uploads
            or body.get("endpoint") != "/v1/chat/completions"
            or body.get("completion_window") != "24h"
        ):
            error = {"message": f"not a batch this server runs: {json.dumps(body)[:200]}"}
            return web.json_response({"error": error}, status=400)
        with self._lock:
            batch_id = f"batch-{len(self.batches) + 1}"
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body["endpoint"],
                "input_file_id": body["input_file_id"],
                "completion_window": body["completion_window"],
                "metadata": body.get("metadata"),
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": int(time.time()),
                "request_counts": {"total": 0, "completed": 0, "failed": 0},
                "polls": 0,
            }
        while self.behaviour.batch_create_stall:  # made; the reply waits to be let go
            await asyncio.sleep(0.02)
        return web.json_response(self._batch_object(batch_id))

    async def list_batches(self, request: web.Request) -> web.Response:
        """The batches, newest first, ``limit`` at a time after the batch ``after``."""
        limit = int(request.query.get("limit", "20"))
        with self._lock:
            ids = list(reversed(self.batches))
        after = request.query.get("after")
        if after in ids:
            ids = ids[ids.index(after) + 1 :]
        page = [self._batch_object(batch_id) for batch_id in ids[:limit]]
        body = {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(ids) > limit,
        }
        return web.json_response(body)

    def _batch_object(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            return {k: v for k, v in self.batches[batch_id].items() if k != "polls"}

    async def retrieve_batch(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["batch_id"]
        if self.behaviour.batch_retrieve_status is not None:
            error = {"error": {"message": "injected", "type": "injected"}}
            return web.json_response(error, status=self.behaviour.batch_retrieve_status)
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is not None and batch["status"] in ("validating", "in_progress"):
                batch["polls"] += 1
                batch["status"] = "in_progress"
                due = batch["polls"] > self.behaviour.batch_polls
            else:
                due = False
        if batch is None:
            return web.json_response({"error": {"message": f"no batch {batch_id}"}}, status=404)
        if due:
            self._run_batch(batch)
        return web.json_response(self._batch_object(batch_id))

    def _run_batch(self, batch: dict[str, Any]) -> None:
        """Answer the batch's items, as its time is up: each into the output file, or the
        error file when its prompt is to fail or the batch expired before it."""
        lines = self.uploads[batch["input_file_id"]].decode().splitlines()
        items = [json.loads(line) for line in lines if line.strip()]
        expire_after = self.behaviour.batch_expire_after
        output, errors = [], []
        for position, item in enumerate(items):
            line: dict[str, Any] = {"id": f"{batch['id']}-req-{position}", "error": None}
            line["custom_id"] = item["custom_id"]
            content = item["body"]["messages"][-1]["content"]
            prompt = _text(content)
            if expire_after is not None and position >= expire_after:
                line["response"] = None
                line["error"] = {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion "
                    "window expired.",
                }
                errors.append(line)
                continue
            if prompt in self.behaviour.batch_fail:
                error = {"message": f"injected batch item failure: {prompt}", "type": "server"}
                line["response"] = {"status_code": 500, "body": {"error": error}}
                errors.append(line)
                continue
            with self._lock:
                self.batch_items[prompt] += 1
            images, files = _image_urls(content), _file_parts(content)
            reply = self._completion(item["body"], prompt, images, files, position)
            line["response"] = {"status_code": 200, "request_id": line["id"], "body": reply}
            output.append(line)

        def jsonl(lines: list[dict[str, Any]]) -> bytes:
            return "".join(json.dumps(line) + "\n" for line in lines).encode()

        output_id = self._new_file(jsonl(output), "output") if output else None
        error_id = self._new_file(jsonl(errors), "errors") if errors else None
        with self._lock:
            batch.update(
                status="expired" if expire_after is not None else "completed",
                output_file_id=output_id,
                error_file_id=error_id,
                request_counts={
                    "total": len(items),
                    "completed": len(output),
                    "failed": len(errors),
                },
            )

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


def _text(content: Any) -> Any:
    """A message's text: a string, or a list of parts (``[{"type": "text", "text": ...}]``, as
    the OpenAI API allows and Daft's prompt sends)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content


def _image_urls(content: Any) -> list[str]:
    """The URLs (``data:`` URIs included) of a message's ``image_url`` parts."""
    if not isinstance(content, list):
        return []
    return [
        str(p["image_url"]["url"])
        for p in content
        if isinstance(p, dict) and p.get("type") == "image_url"
    ]


def _file_parts(content: Any) -> list[dict[str, Any]]:
    """The ``file`` objects of a message's file parts."""
    if not isinstance(content, list):
        return []
    return [p["file"] for p in content if isinstance(p, dict) and p.get("type") == "file"]


def _fill(schema: dict[str, Any], prompt: str, images: list[str]) -> Any:
    """A value of the schema's shape that depends on the prompt (an enum picks the option the
    prompt mentions, or with images and none mentioned, ``label_for_images``'s)."""
    kind = schema.get("type")
    if "enum" in schema:
        mentioned = [v for v in schema["enum"] if str(v) in prompt]
        if not mentioned and images:
            return label_for_images(schema["enum"], images)
        return (mentioned or schema["enum"])[0]
    if kind == "object":
        return {name: _fill(child, prompt, images) for name, child in schema["properties"].items()}
    if kind == "array":
        return [_fill(schema.get("items", {}), prompt, images)]
    if kind == "integer":
        return len(prompt)
    if kind == "number":
        return len(prompt) / 2
    if kind == "boolean":
        return True
    return prompt


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


if __name__ == "__main__":
    main()


# ---- images for embed_image and classify_image -------------------------------------------------


def label_for_images(labels: list[Any], images: list[str]) -> Any:
    """The label a structured answer about ``images`` (their URLs or ``data:`` URIs) picks
    when its prompt names none: one of them, by the images' digest, as a test can work out."""
    digest = hashlib.sha256("".join(images).encode()).digest()
    return labels[int.from_bytes(digest[:4], "big") % len(labels)]


async def chat_embedding(
    server: OpenAIServer, body: dict[str, Any], request: web.Request
) -> web.Response:
    """``/v1/embeddings`` in vLLM's chat-style form (``messages`` instead of ``input``): one
    embedding of the last message, ``vector_for`` its text followed by its image URLs; the
    images are kept in ``server.image_urls``, the text counted in ``by_text``."""
    content = body["messages"][-1]["content"]
    text, images = str(_text(content)), _image_urls(content)
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
