"""Where a resumable write keeps the work it has done, so that a rerun pays for nothing twice.

``write_*(..., resume=True)`` keeps, beside a local destination, a folder
(``.<name>.vane-resume``; for a URL, one in this machine's cache: ``store_path``) holding
what each UDF step of the job answered, batch by batch, each under a digest of the batch's
input and the step's identity. A rerun of the same pipeline reads its input again (SQL
and reading are cheap; models and hosted APIs are not), and every batch whose answer is kept is
taken from there instead of being sent to the function: a job killed at any instant pays again
for the batches that were in flight, never for one whose answer was kept. The output itself is
written by the sink's commit protocol as ever, all at once at the end, so it holds every row
exactly once whatever the number of reruns; once it is committed, the folder is removed.

The protocol, and why each step is safe under ``kill -9`` at any instant:

1. ``open``: the folder and ``pipeline.json`` (what the job was: its plan, each UDF step's code
   and options, its input files) are created if absent; if present, the job must be the same
   one, or it is refused with what changed (``resume="restart"`` drops the saved work first).
   ``pipeline.json`` is written to a temporary name and renamed, so it is whole or absent.
2. ``put``: an answer is written to ``<step>/<digest>.tmp-<unique>`` (an Arrow IPC file, then
   a trailer: a CRC-32 of those bytes), then renamed to ``<step>/<digest>.arrow``. A kill before
   the rename leaves a ``.tmp-`` file that is never read (and is removed with the folder); after
   it, the answer is whole: a killed process's writes are in the kernel's page cache, which
   outlives it. The stage puts an answer before it hands the rows on, so no answer that
   reached the output is ever lost. The file is not synced to disk (``fsync``) one by one:
   that cost more than the rest of a quick function's job (8 ms a batch on the benchmark's
   machine, against 0.3 ms for the function). Only the output's correctness needs
   durability, and the sink's commit gives it that, all at once; an answer lost with the
   machine (a power cut before the kernel wrote it out) is paid for again, and one that came
   back torn (a rename on disk before its data) fails its CRC and is computed again too.
3. ``get``: reads ``<digest>.arrow`` if it exists and its CRC holds. An answer is the
   function's output for that exact input (the digest covers every value of every column the
   function is given, in order), so taking it is the same as calling the function again,
   minus the cost.
4. ``finish``: after the sink has committed, the folder is removed. A kill between the commit
   and the removal leaves a folder whose work is all in the output; a later ``resume=True``
   write to the same path with ``mode="error"`` fails on the existing output as usual.

Digests make the saved answers independent of how the input was cut into batches only as long
as it is cut the same way: the stage cuts its input into ``batch_size`` rows from a stream in a
fixed order, so the same input gives the same batches. A pipeline that reads its input in a
different order (``preserve_order=False`` upstream) simply finds fewer answers.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from vane.errors import ResumeError

# write_*(resume=...): keep and use saved work (True), or drop another pipeline's first.
Resume = bool | Literal["restart"]
PIPELINE = "pipeline.json"
_META = b"vane.resume"
# What follows an answer's Arrow IPC bytes: a magic number and their CRC-32 (see ``put``).
_TRAILER = struct.Struct("<8sI")
_MAGIC = b"VANECRC1"


def cache_root() -> Path:
    """This machine's cache for what vane keeps between runs: ``$VANE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/vane``, else ``~/.cache/vane``."""
    root = os.environ.get("VANE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vane"
    )
    return Path(root)


def store_path(destination: str) -> Path:
    """The folder a resumable write to ``destination`` keeps its work in: beside a local
    destination; for a URL (an object store, any remote filesystem), in this machine's cache
    (``$VANE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vane``, else ``~/.cache/vane``), under a
    digest of the URL, so that the answers are kept where writing them is cheap and safe."""
    if "://" in destination:
        import hashlib

        digest = hashlib.blake2b(destination.rstrip("/").encode(), digest_size=16).hexdigest()
        return cache_root() / "resume" / digest
    target = Path(destination.rstrip("/") or destination)
    return target.parent / f".{target.name}.vane-resume"


@dataclass(frozen=True)
class Saved:
    """An answer kept for one batch: the function's output and what on_error did to it."""

    table: pa.Table
    meta: Mapping[str, Any]


class ResumeStore:
    """The saved work of one resumable write (see the module's text)."""

    def __init__(self, destination: str, caller: str) -> None:
        self.path = store_path(destination)
        self.caller = caller
        self.found = 0  # batches answered from saved work in this run
        self._folders: set[str] = set()  # steps whose folder this run has made

    def open(self, fingerprint: Mapping[str, Any], *, restart: bool) -> bool:
        """Start or continue the saved work; True if there was some to continue."""
        if restart and self.path.exists():
            shutil.rmtree(self.path)
        existing = self.path / PIPELINE
        if existing.exists():
            try:
                saved = json.loads(existing.read_text())
            except (OSError, ValueError) as exc:
                raise ResumeError(
                    f"{self.caller}(): the saved work in {str(self.path)!r} cannot be read "
                    f"({exc}); pass resume='restart' to start over"
                ) from exc
            changes = describe_changes(saved, fingerprint)
            if changes:
                raise ResumeError(
                    f"{self.caller}(): the pipeline is not the one whose work is saved in "
                    f"{str(self.path)!r}: {'; '.join(changes)}. Rerun the same pipeline to "
                    "resume it, or pass resume='restart' to drop the saved work and start over"
                )
            return True
        self.path.mkdir(parents=True, exist_ok=True)
        partial = self.path / f"{PIPELINE}.tmp-{uuid.uuid4().hex}"
        partial.write_text(json.dumps(fingerprint, indent=1, sort_keys=True))
        os.replace(partial, existing)
        return False

    def get(self, step: str, digest: str) -> Saved | None:
        path = self.path / step / f"{digest}.arrow"
        try:
            with pa.memory_map(str(path)) as source:
                data = source.read_buffer()
            body, trailer = data[: -_TRAILER.size], data[-_TRAILER.size :]
            magic, crc = _TRAILER.unpack(trailer.to_pybytes())
            if magic != _MAGIC or zlib.crc32(body) != crc:
                return None  # torn: computed again, and put over it
            table = pa.ipc.open_file(body).read_all()
        except FileNotFoundError:
            return None
        except (OSError, ValueError, struct.error, pa.ArrowInvalid):
            return None  # unreadable: computed again, and put over it
        meta = json.loads((table.schema.metadata or {}).get(_META, b"{}"))
        self.found += 1
        return Saved(table.replace_schema_metadata(None), meta)

    def put(self, step: str, digest: str, table: pa.Table, meta: Mapping[str, Any]) -> None:
        folder = self.path / step
        if step not in self._folders:
            folder.mkdir(parents=True, exist_ok=True)
            self._folders.add(step)
        partial = folder / f"{digest}.tmp-{uuid.uuid4().hex}"
        schema = table.schema.with_metadata({_META: json.dumps(meta).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table.replace_schema_metadata(schema.metadata))
        body = sink.getvalue()
        with open(partial, "wb") as raw:
            raw.write(body)
            raw.write(_TRAILER.pack(_MAGIC, zlib.crc32(body)))
        os.replace(partial, folder / f"{digest}.arrow")

    def finish(self) -> None:
        """The output is committed: the saved work has served."""
        shutil.rmtree(self.path, ignore_errors=True)


def describe_changes(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two pipelines' fingerprints, in words."""
    changes = []
    saved_steps, steps = dict(saved.get("steps", {})), dict(now.get("steps", {}))
    for name in sorted(saved_steps.keys() | steps.keys()):
        if name not in steps:
            changes.append(f"step `{name}` is gone")
        elif name not in saved_steps:
            changes.append(f"step `{name}` is new")
        elif saved_steps[name] != steps[name]:
            changes.append(f"step `{name}` changed (its function's code or options)")
    saved_inputs, inputs = dict(saved.get("inputs", {})), dict(now.get("inputs", {}))
    added = inputs.keys() - saved_inputs.keys()
    removed = saved_inputs.keys() - inputs.keys()
    replaced = [k for k in inputs.keys() & saved_inputs.keys() if inputs[k] != saved_inputs[k]]
    for what, found in (("new", added), ("gone", removed), ("changed", replaced)):
        if found:
            first = sorted(found)[0]
            more = f" and {len(found) - 1} more" if len(found) > 1 else ""
            changes.append(f"input file {first!r}{more} {'is' if not more else 'are'} {what}")
    if not changes and saved.get("plan") != now.get("plan"):
        changes.append("its steps differ (compare explain() with the saved plan in pipeline.json)")
    return changes
