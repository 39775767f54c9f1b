"""Pay once: answers kept on disk, keyed by everything that decides them.

The key is a hash of the provider, its address, the model, the full request (messages) and the
generation options; the store is SQLite in WAL mode, one small transaction per answer as it
arrives, so a run killed at any point keeps every answer it received and a rerun sends only the
requests not yet answered. Several actors (threads or processes) may share one cache directory.
Only answers are kept, never errors.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_FILE = "answers.sqlite"


def request_key(parts: Mapping[str, Any]) -> str:
    """A stable hash of a request's parts (JSON with sorted keys)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class AnswerCache:
    def __init__(self, directory: str | Path) -> None:
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / _FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # survives a process crash
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                "prompt_tokens INTEGER, completion_tokens INTEGER)"
            )
            self._db.commit()

    def get(self, key: str) -> tuple[Any, int, int] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, prompt_tokens, completion_tokens FROM answers WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        return json.loads(row[0]), int(row[1] or 0), int(row[2] or 0)

    def put(self, key: str, value: Any, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)",
                (key, json.dumps(value), prompt_tokens, completion_tokens),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
