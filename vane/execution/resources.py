"""What the local machine offers: GPUs visible to this process, CPU cores, memory."""

from __future__ import annotations

import os
import shutil
import subprocess


def visible_gpus() -> list[str]:
    """Device ids this process may use: ``CUDA_VISIBLE_DEVICES`` when it is set (as CUDA reads
    it), else the devices ``nvidia-smi`` lists, else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [part.strip() for part in env.split(",") if part.strip()]
        # CUDA stops at the first invalid id; "-1" is the usual way to hide every device.
        valid = []
        for device in ids:
            if device.startswith("-"):
                break
            valid.append(device)
        return valid
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def gpus_needed(concurrency: int, gpus_per_actor: float) -> int:
    if not gpus_per_actor:
        return 0
    whole = concurrency * gpus_per_actor
    return int(whole) if whole == int(whole) else int(whole) + 1


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
