"""Helpers the integration tests share: a UDF spec built as the verbs build it, a check
that a process has ended, and a table read by a process of its own that then exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import vane
from vane.udf.build import build_spec
from vane.udf.spec import UdfSpec


def udf_spec(fn: object, **changes: Any) -> UdfSpec:
    """The spec ``map_batches(fn, ...)`` builds with its defaults (thread backend), then
    ``changes`` applied to it."""
    spec = build_spec(
        "map_batches",
        fn,
        kind="batch",
        batch_size=None,
        execution_backend=changes.pop("backend", "thread"),
        concurrency=1,
        gpus=0,
        cpus=None,
        memory=None,
        fn_constructor_args=changes.pop("constructor_args", ()),
        fn_constructor_kwargs=None,
        fn_kwargs=None,
        max_concurrency_per_actor=None,
        max_retries=0,
        on_error="raise",
        preserve_order=True,
    )
    return replace(spec, **changes)


def gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (a zombie left for init to reap
    counts as ended)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:  # no such file, or (reaped between the open and the read) no such process
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def worker_pids() -> set[int]:
    """The worker processes of subprocess actors this process started that are still there."""
    import os

    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and b"vane.execution.actors._worker" in command:
            pids.add(int(entry.name))
    return pids


READ_AND_STOP = """
import json, sys
import vane

fmt, where, way, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if fmt == "delta":
    rel = vane.read_deltalake(where, **options)
elif fmt == "lance":
    rel = vane.read_lance(where, **options)
else:
    rel = vane.read_iceberg(where, **options)
if way == "limit":
    assert len(rel.limit(5).to_pylist()) == 5
elif way == "first batch":
    for batch in rel.iter_batches():
        break
else:
    assert rel.count() == 400_000
print("read")
"""


def read_and_exit(fmt: str, where: str, way: str, options: dict[str, Any], folder: Path) -> None:
    """Read the table ``way`` in a process of its own, which then exits as a user's script does:
    cleanly, not with a crash or a hang after its work (a reader's threads still in flight)."""
    script = folder / "read_and_stop.py"
    script.write_text(READ_AND_STOP)
    root = Path(vane.__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            [sys.executable, str(script), fmt, where, way, json.dumps(options)],
            cwd=folder,
            env={**os.environ, "PYTHONPATH": str(root), "PYTHONFAULTHANDLER": "1"},
            check=False,
            capture_output=True,
            text=True,
            timeout=240,  # a guard against a hang, not a measure
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"reading {fmt} ({way}) hung at exit: {exc.stdout!r}") from exc
    said = f"{done.stdout}\n{done.stderr[-3000:]}"
    assert done.returncode == 0 and done.stdout.strip() == "read", (
        f"reading {fmt} ({way}) exited with {done.returncode}:\n{said}"
    )
