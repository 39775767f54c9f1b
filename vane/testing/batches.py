"""OpenAI's Batch API, as the test server runs it: ``POST /v1/files``, ``GET
/v1/files/{id}/content``, and creating, listing and retrieving ``/v1/batches``. A batch's time
is counted in retrievals (``Behaviour.batch_polls``), not seconds, so its tests are
deterministic; items can fail or expire as the behaviour says."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

from vane.testing.replies import Behaviour, file_parts, image_urls, message_text


class BatchApi:
    """The Batch API's handlers, part of ``OpenAIServer``: its uploads, batches and the items
    answered in batches, under the server's lock; each item is answered as a live request is
    (``_completion``)."""

    behaviour: Behaviour
    uploads: dict[str, bytes]
    batches: dict[str, dict[str, Any]]
    batch_items: Counter[str]
    _lock: threading.Lock
    # (body, prompt, images, files, number) -> the chat completion a live request gets
    _completion: Callable[[Any, str, list[str], list[Any], int], dict[str, Any]]

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
            prompt = message_text(content)
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
            images, files = image_urls(content), file_parts(content)
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
