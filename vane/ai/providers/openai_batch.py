"""``prompt(..., mode="batch")``: a step's requests sent through OpenAI's Batch API.

The requests are the ones a live step sends, answered by the same code; only the way they
travel differs. Each call of the step (a batch of its rows) becomes one provider batch: the
requests not answered by the cache are written as a JSONL file, one line per distinct request
with its cache key as ``custom_id``, uploaded (``POST /files``, purpose ``batch``), and run
(``POST /batches`` on ``/v1/chat/completions`` in a ``24h`` window). The batch is then polled
(``GET /batches/{id}``, every ``batch_poll_interval`` seconds) until it ends, its output and
error files are downloaded, and each line is matched to its request by ``custom_id``.

Never twice: a journal (``batches.sqlite`` in the cache directory, else in this machine's
cache) holds one row per request sent and not yet answered, each SQLite transaction committed
(``synchronous=FULL``) before the step goes on. Before anything is sent, the requests are
journaled with a fresh token, which the batch carries in its ``metadata``; once the server has
created the batch, its id is journaled beside them. A step that finds a request in the journal
polls the batch that holds it instead of sending it again, so a job killed while its batches
run (or a rerun after any failure) picks them up where they are. A job killed while submitting
leaves the token alone: the rerun looks for it in the server's list of batches
(``GET /batches``) and polls the batch it finds, or submits the requests if the server never
made one (the same is done when a create's reply is lost). A request leaves the journal once
its answer has been handed back (and kept in the cache, when there is one); a batch the server
no longer knows (HTTP 404) is forgotten and its requests are sent anew.

An item the batch did not answer (it failed, or the batch expired, failed or was cancelled
before it) is asked live, as ``mode="live"`` would ask it (``batch_fallback="live"``, the
default), or fails its row, for ``on_error`` to raise, skip or null (``batch_fallback="error"``).
A batch that cannot be uploaded or created is such a failure for all its items. A batch that
cannot be polled or downloaded after the client's retries fails the call: its id stays in the
journal, so the rerun polls it again rather than paying for its requests twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from vane.ai.protocols import NotFound, PromptRequest, Usage
from vane.ai.providers.openai_http import Transport
from vane.errors import ConfigurationError, ProviderError

JOURNAL = "batches.sqlite"
ENDPOINT = "/v1/chat/completions"
_COLUMNS = ["key", "token", "since", "batch_id"]
TOKEN = "vane_submission"  # the metadata key of the token a batch is found again by
_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
log = logging.getLogger("vane")


class Client(Protocol):
    """What a batch is sent through: the OpenAI provider's client, its retries included."""

    base_url: str
    http: Transport  # the requests go through it, retries included

    def chat_body(self, request: PromptRequest) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Submission:
    """A batch as the journal knows it: the token vane put in its metadata, when vane began
    to submit it, and its id once the server has said it (None before)."""

    token: str
    since: float
    batch_id: str | None


class BatchJournal:
    """Which provider batch holds each request sent and not yet answered: SQLite in WAL mode,
    shared by the step's actors (threads or processes) and by the reruns of a job."""

    def __init__(self, directory: str | Path) -> None:
        folder = Path(directory).expanduser()
        self.path = folder / JOURNAL
        self._lock = threading.Lock()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")  # a batch id survives power loss
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS submitted (key TEXT PRIMARY KEY, "
                    "token TEXT NOT NULL, since REAL NOT NULL, batch_id TEXT)"
                )
                self._db.commit()
                table = self._db.execute("PRAGMA table_info(submitted)")
                columns = [row[1] for row in table]
        except (OSError, sqlite3.Error) as exc:
            raise self._unusable(exc) from None
        if columns != _COLUMNS:
            self._db.close()
            raise self._unusable(f"its table has the columns {columns}")

    def _unusable(self, why: object) -> ConfigurationError:
        return ConfigurationError(
            f"mode='batch' keeps the ids of the batches it submits in {self.path}, which "
            f"cannot be used ({why}); pass a cache= directory vane may write to, or delete the "
            "file if it is damaged or not vane's (batches it names will be submitted again)"
        )

    def submissions(self, keys: Iterable[str]) -> dict[str, Submission]:
        """The submission journaled for each of ``keys`` that has one."""
        keys = list(keys)
        found: dict[str, Submission] = {}
        with self._lock:
            for start in range(0, len(keys), 500):  # SQLite's limit on bound parameters
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, token, since, batch_id FROM submitted WHERE key IN ({marks})",
                    chunk,
                )
                found.update((key, Submission(*rest)) for key, *rest in rows.fetchall())
        return found

    def intend(self, keys: Sequence[str]) -> Submission:
        """Journal ``keys`` as about to be submitted, before anything is sent: a kill between
        the server creating the batch and ``record`` leaves the token to find it by."""
        submission = Submission(uuid.uuid4().hex, time.time(), None)
        rows = [(key, submission.token, submission.since) for key in keys]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO submitted VALUES (?, ?, ?, NULL)", rows)
            self._db.commit()
        return submission

    def record(self, token: str, batch_id: str) -> None:
        """The server created the submission's batch: its id."""
        with self._lock:
            self._db.execute("UPDATE submitted SET batch_id = ? WHERE token = ?", (batch_id, token))
            self._db.commit()

    def forget(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._db.executemany("DELETE FROM submitted WHERE key = ?", [(k,) for k in keys])
            self._db.commit()

    def __len__(self) -> int:
        """How many requests are journaled with a batch id."""
        with self._lock:
            query = "SELECT count(*) FROM submitted WHERE batch_id IS NOT NULL"
            return int(self._db.execute(query).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(frozen=True)
class Outcome:
    """What a batch made of one request: the chat completion it answered, or why none."""

    reply: Any = None
    error: str | None = None


class BatchDispatch:
    """One actor's way of sending requests as provider batches, through its ``Client``."""

    def __init__(
        self, client: Client, journal: str | Path, poll_interval: float, fallback: str = "live"
    ) -> None:
        self.client = client
        self.fallback = fallback  # batch_fallback: "live" or "error", for the log to say
        self.journal = BatchJournal(journal)
        self.poll_interval = poll_interval
        # The Batch API's own requests (files, batches, polls): the service's, not the model's,
        # so they are counted apart from the step's requests.
        self.calls = Usage()

    async def outcomes(self, pending: Mapping[str, PromptRequest]) -> dict[str, Outcome]:
        """Each of ``pending``'s requests (by key) as a batch answered it: from the batches
        the journal says hold it, else from one new batch of them all."""
        journaled = self.journal.submissions(pending)
        held: dict[Submission, list[str]] = {}
        for key, submission in journaled.items():
            held.setdefault(submission, []).append(key)
        fresh = [key for key in pending if key not in journaled]
        waits = [self._resume(submission, keys, pending) for submission, keys in held.items()]
        if fresh:
            waits.append(self._run(fresh, pending))
        found: dict[str, Outcome] = {}
        for part in await asyncio.gather(*waits):
            found.update(part)
        return found

    def delivered(self, keys: Iterable[str]) -> None:
        """These requests' answers are handed back (and cached): no rerun needs their batch."""
        self.journal.forget(keys)

    async def _resume(
        self, submission: Submission, keys: list[str], pending: Mapping[str, PromptRequest]
    ) -> dict[str, Outcome]:
        """The outcomes of a batch an earlier run submitted (or began to)."""
        batch_id = submission.batch_id
        if batch_id is None:  # killed while submitting: did the server create the batch?
            batch_id = await self._find(submission)
            if batch_id is None:
                self.journal.forget(keys)
                return await self._run(keys, pending)
            self.journal.record(submission.token, batch_id)
        try:
            return await self._collect(batch_id, keys)
        except NotFound:
            log.warning(
                "the batch %s that the journal %s names is gone from %s: its %d requests are "
                "submitted again",
                batch_id,
                self.journal.path,
                self.client.base_url,
                len(keys),
            )
            self.journal.forget(keys)
            return await self._run(keys, pending)

    async def _run(
        self, keys: list[str], pending: Mapping[str, PromptRequest]
    ) -> dict[str, Outcome]:
        submission = self.journal.intend(keys)
        try:
            batch_id = await self._submit(submission, keys, pending)
        except ProviderError as exc:
            # A create whose reply was lost may have made the batch all the same.
            try:
                found = await self._find(submission)
            except ProviderError:  # no list of batches to look in: it was not made, then
                found = None
            if found is None:
                self.journal.forget(keys)
                log.warning(
                    "a batch of %d requests could not be submitted to %s (%s): they are %s",
                    len(keys),
                    self.client.base_url,
                    exc,
                    "asked live" if self.fallback == "live" else "failed",
                )
                failed = Outcome(error=f"the batch could not be submitted: {exc}")
                return dict.fromkeys(keys, failed)
            batch_id = found
        try:
            self.journal.record(submission.token, batch_id)
        except sqlite3.Error as exc:  # the batch runs; a rerun would find it by its token
            log.warning(
                "the batch %s could not be journaled in %s (%s)", batch_id, self.journal.path, exc
            )
        return await self._collect(batch_id, keys)

    async def _submit(
        self, submission: Submission, keys: list[str], pending: Mapping[str, PromptRequest]
    ) -> str:
        lines = (
            json.dumps(
                {
                    "custom_id": key,
                    "method": "POST",
                    "url": ENDPOINT,
                    "body": self.client.chat_body(pending[key]),
                }
            )
            for key in keys
        )
        data = "".join(line + "\n" for line in lines).encode()
        body, content_type = _multipart({"purpose": "batch"}, "file", "requests.jsonl", data)
        uploaded = await self.client.http.send(
            "POST", "/files", self.calls, body, content_type=content_type
        )
        create = {
            "input_file_id": _field(uploaded, "id", "/files"),
            "endpoint": ENDPOINT,
            "completion_window": "24h",
            "metadata": {"created_by": "vane prompt(mode='batch')", TOKEN: submission.token},
        }
        created = await self.client.http.send(
            "POST", "/batches", self.calls, json.dumps(create).encode()
        )
        return str(_field(created, "id", "/batches"))

    async def _find(self, submission: Submission) -> str | None:
        """The id of the batch whose metadata holds the submission's token, if the server
        made one: its list of batches, newest first, read back to an hour before vane began
        to submit (a margin for clocks that disagree)."""
        after = ""
        while True:
            page = await self.client.http.send(
                "GET", f"/batches?limit=100{after and f'&after={after}'}", self.calls
            )
            data = page.get("data") if isinstance(page, dict) else None
            if not isinstance(data, list) or not data:
                return None
            for batch in data:
                metadata = batch.get("metadata") if isinstance(batch, dict) else None
                if isinstance(metadata, dict) and metadata.get(TOKEN) == submission.token:
                    return str(batch["id"])
            last = data[-1] if isinstance(data[-1], dict) else {}
            created = last.get("created_at")
            older = isinstance(created, (int, float)) and created < submission.since - 3600
            if older or not page.get("has_more") or not last.get("id"):
                return None
            after = str(last["id"])

    async def _collect(self, batch_id: str, keys: list[str]) -> dict[str, Outcome]:
        """Poll the batch until it ends, then read its output and error files."""
        while True:
            batch = await self.client.http.send("GET", f"/batches/{batch_id}", self.calls)
            status = batch.get("status") if isinstance(batch, dict) else None
            if status in _ENDED:
                break
            if status not in _RUNNING:
                raise ProviderError(
                    f"{self.client.base_url}/batches/{batch_id} says the batch is "
                    f"{status!r}, not a status of the Batch API"
                )
            await asyncio.sleep(self.poll_interval)
        found: dict[str, Outcome] = {}
        for name in ("output_file_id", "error_file_id"):
            file_id = batch.get(name)
            if isinstance(file_id, str) and file_id:
                content = await self.client.http.send(
                    "GET", f"/files/{file_id}/content", self.calls, raw=True
                )
                found.update(_lines(content))
        unanswered = Outcome(error=f"the batch {batch_id} ended {status}{_why(batch)}")
        return {key: found.get(key, unanswered) for key in keys}


def _lines(content: bytes) -> Iterable[tuple[str, Outcome]]:
    """The ``(custom_id, outcome)`` of each line of a batch's output or error file; a line
    that cannot be read says nothing (its request is then unanswered)."""
    for line in content.decode("utf-8", errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict) or not isinstance(item.get("custom_id"), str):
            continue
        yield item["custom_id"], _outcome(item)


def _outcome(item: Mapping[str, Any]) -> Outcome:
    error = item.get("error")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return Outcome(error=f"the batch did not answer it: {code}: {message}")
    response = item.get("response")
    if not isinstance(response, dict):
        return Outcome(error="the batch's line for it holds no response")
    status, body = response.get("status_code"), response.get("body")
    if status == 200 and isinstance(body, dict):
        return Outcome(reply=body)
    message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    return Outcome(error=f"the batch answered it HTTP {status}: {message or body}")


def _why(batch: Mapping[str, Any]) -> str:
    """The batch's own errors (a batch that failed validation lists them), if any."""
    errors = batch.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    if not isinstance(data, list) or not data:
        return " without answering it"
    first = data[0] if isinstance(data[0], dict) else {}
    return f" without answering it: {first.get('code')}: {first.get('message')}"


def _field(reply: Any, name: str, path: str) -> Any:
    value = reply.get(name) if isinstance(reply, dict) else None
    if not value:
        raise ProviderError(f"the reply of {path} has no {name}: {str(reply)[:120]}")
    return value


def _multipart(
    fields: Mapping[str, str], name: str, filename: str, data: bytes
) -> tuple[bytes, str]:
    """A multipart/form-data body (the form fields, then the file), and its content type:
    bytes made once, so that every retry sends the same."""
    boundary = f"vane-{uuid.uuid4().hex}"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in fields.items()
    ]
    parts.append(
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/jsonl\r\n\r\n'
        ).encode()
        + data
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
