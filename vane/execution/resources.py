"""What the local machine offers: GPUs visible to this process, CPU cores, memory."""

from __future__ import annotations

import math
import os
import shutil

from vane._text import counted
from vane.errors import ConfigurationError
from vane.udf.spec import UdfSpec


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
    import subprocess  # (only where nvidia-smi is: not on a first result's path)

    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def gpus_needed(concurrency: int, gpus_per_actor: float) -> int:
    """Devices for ``concurrency`` actors of ``gpus_per_actor`` each: whole devices each, or,
    for a fraction, as many actors to a device as fit whole on it (an actor's share never
    spans two devices: ``warm.share_devices``)."""
    if not gpus_per_actor:
        return 0
    if gpus_per_actor >= 1:
        return concurrency * math.ceil(gpus_per_actor)
    return math.ceil(concurrency / shares_per_device(gpus_per_actor))


def shares_per_device(gpus_per_actor: float) -> int:
    """Actors of a fractional ``gpus_per_actor`` that fit on one device (1e-9: 1/3 * 3 is 1)."""
    return max(1, math.floor(1 / gpus_per_actor + 1e-9))


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


def check_resources(spec: UdfSpec, step: str) -> list[str]:
    """The visible GPU ids, or an error before anything runs if the machine cannot give every
    actor what the step asks for (rather than a step that waits forever)."""
    actors = spec.max_actors
    if spec.cpus:
        cores = usable_cpus()
        if actors * spec.cpus > cores:
            raise ConfigurationError(
                f"{spec.verb} step `{step}` asks for {actors * spec.cpus:g} "
                f"CPU{'' if actors * spec.cpus == 1 else 's'} (concurrency "
                f"{actors} x cpus {spec.cpus:g}), and this process may use {cores}. Lower "
                "concurrency or cpus"
            )
    memory = total_memory()
    if spec.memory and memory is not None and actors * spec.memory > memory:
        raise ConfigurationError(
            f"{spec.verb} step `{step}` asks for {actors * spec.memory / 2**30:.1f} GiB of memory "
            f"(concurrency {actors} x memory {spec.memory / 2**30:.1f} GiB), and this machine "
            f"has {memory / 2**30:.1f} GiB. Lower concurrency or memory"
        )
    if not spec.gpus:
        return []
    visible = visible_gpus()
    needed = gpus_needed(spec.max_actors, spec.gpus)
    if needed > len(visible):
        found = ", ".join(visible) if visible else "none"
        raise ConfigurationError(
            f"{spec.verb} step `{step}` asks for {counted(needed, 'GPU')} "
            f"(concurrency {spec.max_actors} "
            f"x gpus {spec.gpus}), and this machine shows {len(visible)} (visible devices: "
            f"{found}). Lower concurrency or gpus, or set CUDA_VISIBLE_DEVICES to the devices "
            "this step may use"
        )
    return visible
