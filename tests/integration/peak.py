"""Peak memory of a piece of code, run in a fresh process tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]  # so the measured code can import tests.*

_WRAPPER = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[1]], check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_mb(code: str, timeout: float = 600) -> float:
    """Run ``code`` in a new process (and whatever it starts) and return the largest resident
    set any process of that tree reached, in MB."""
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=_ROOT,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"measured code failed:\n{out.stderr[-3000:]}")
    return int(out.stdout.strip().splitlines()[-1]) / 1024
