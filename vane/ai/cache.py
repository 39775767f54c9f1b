"""Pay once: answers kept on disk, keyed by everything that decides them.

The key is a hash of the provider, its address, the model, the full request (messages) and the
generation options; the store is SQLite in WAL mode, one small transaction per answer as it
arrives, so a run killed at any point keeps every answer it received and a rerun sends only the
requests not yet answered. Several actors (threads or processes) may share one cache directory.
Only answers are kept, never errors, and never a reply that is no answer.

The cache never fails a row. A file that is not a cache (not SQLite, or another table) is a
``ConfigurationError`` naming it when the cache is opened. An entry that cannot be read, or a
store that fails while the job runs (a damaged page, a full disk), is a miss: the request is
sent again, and one warning names the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vane.errors import ConfigurationError

_FILE = "answers.sqlite"
_COLUMNS = ["key", "value", "prompt_tokens", "completion_tokens"]
log = logging.getLogger("vane")


def request_key(parts: Mapping[str, Any]) -> str:
    """A stable hash of a request's parts (JSON with sorted keys)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Kept:
    """A kept answer: the model's text, and the tokens it cost when it was asked."""

    text: Any
    prompt_tokens: int
    completion_tokens: int


class AnswerCache:
    def __init__(self, directory: str | Path) -> None:
        path = Path(directory).expanduser()
        self.path = path / _FILE
        self._lock = threading.Lock()
        self._warned = False
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"cache={str(directory)!r} cannot be a cache directory ({exc.strerror or exc}); "
                "pass a directory vane may create files in"
            ) from None
        try:
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._not_a_cache(exc) from None
        try:
            with self._lock:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # survives a process crash
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT "
                    "NULL, prompt_tokens INTEGER, completion_tokens INTEGER)"
                )
                self._db.commit()
                columns = [row[1] for row in self._db.execute("PRAGMA table_info(answers)")]
        except sqlite3.Error as exc:
            self._db.close()
            raise self._not_a_cache(exc) from None
        if columns != _COLUMNS:
            self._db.close()
            raise self._not_a_cache(f"its answers table has the columns {columns}")

    def _not_a_cache(self, why: object) -> ConfigurationError:
        return ConfigurationError(
            f"the answer cache {self.path} cannot be used: {why}. It is not a cache vane wrote, "
            "or it is damaged: delete it (its answers will be asked again), or pass another "
            "cache= directory"
        )

    def unreadable(self, why: str, then: str = "its request is sent again") -> None:
        """Say, once per cache, that something kept in it could not be used, and what vane
        does instead."""
        if self._warned:
            return
        self._warned = True
        log.warning(
            "the answer cache %s: %s; %s. If this repeats, delete the file (its answers will be "
            "asked again) or pass another cache= directory",
            self.path,
            why,
            then,
        )

    def get(self, key: str) -> Kept | None:
        """The answer kept for ``key``, or None: never kept, or not readable (then said once)."""
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT value, prompt_tokens, completion_tokens FROM answers WHERE key = ?",
                    (key,),
                ).fetchone()
        except sqlite3.Error as exc:
            self.unreadable(f"reading it failed ({exc})")
            return None
        if row is None:
            return None
        value, prompt_tokens, completion_tokens = row
        try:
            text = json.loads(value)
        except (TypeError, ValueError, RecursionError):
            self.unreadable(f"an entry is not JSON: {str(value)[:80]!r}")
            return None
        return Kept(text, _count(prompt_tokens), _count(completion_tokens))

    def put(self, key: str, text: Any, prompt_tokens: int, completion_tokens: int) -> None:
        """Keep an answer; a store that fails costs the next run a request, not this row."""
        try:
            with self._lock:
                self._db.execute(
                    "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)",
                    (key, json.dumps(text), prompt_tokens, completion_tokens),
                )
                self._db.commit()
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            self.unreadable(f"keeping an answer failed ({exc})", "the answer is used, not kept")

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
