"""Helpers the integration tests share: a UDF spec built as the verbs build it, and a check
that a process has ended."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

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
