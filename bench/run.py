"""The benchmark driver: every engine on the same data in the same run, written up in RESULTS.md.

    make bench          # full sizes, 3 runs of each variant
    make bench-quick    # small sizes, 1 run: a smoke test of the whole suite in a few minutes

Run it with vane's interpreter (it needs pyarrow and psutil). Each variant is a script in
``variants/`` run as its own process with its engine's interpreter: vane's venv for vane, the
hand-written loops and DuckDB, ``.bench-venv`` for Daft and Ray Data, so that no peer's
dependencies ever meet vane's. Runs alternate round-robin (A1 B1 C1 A2 B2 C2 ...), so a slow
minute on this shared machine hits every engine alike instead of one engine's runs.

While a variant runs, a thread samples the resident memory of its whole process tree every
50 ms (the process, its children and theirs: actors, Ray's daemons and workers) and keeps the
peak. A process seen once stays counted until it exits, even if its parent dies and it is
reparented. The output each variant wrote is read back and its rows counted: a variant that
drops rows is reported as an error, not as a fast run.

Results go to ``results.json`` (every run, raw, rewritten after each run so an interrupted
suite keeps what it measured) and ``RESULTS.md`` (see ``report.py``).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import data
import psutil
import pyarrow.parquet as pq
import report

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VARIANTS = BENCH / "variants"
WORK = data.DATA_DIR / "runs"  # outputs and logs of the runs; outputs are deleted once counted
INTERPRETERS = {
    "vane": ROOT / ".venv" / "bin" / "python",
    "peers": ROOT / ".bench-venv" / "bin" / "python",
}
SAMPLE_EVERY = 0.05
PROMPT_LATENCY = 0.05
IN_FLIGHT = 64
# prompt_busy: many more requests in flight, each answered sooner: the client's CPU, not the
# server, becomes the limit (the server's own is BUSY_IN_FLIGHT / BUSY_LATENCY rows/s).
BUSY_LATENCY = 0.02
BUSY_IN_FLIGHT = 256


@dataclass(frozen=True)
class Variant:
    """One engine's way of doing a workload: a script, its interpreter and its arguments."""

    name: str
    script: str
    venv: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    """A variant on one input, run ``repetitions`` times."""

    variant: Variant
    kind: str  # the data.py generator
    rows: int
    args: tuple[str, ...] = ()
    writes: bool = True  # the run writes its rows under --out, to be counted

    @property
    def label(self) -> str:
        return f"{self.variant.name}@{self.rows}"


@dataclass
class Workload:
    name: str
    cases: list[Case]
    needs_server: bool = False  # the prompt server runs for the whole workload
    latency: float = PROMPT_LATENCY  # the prompt server's seconds before each answer
    needs_store: bool = False  # the local S3 server runs, with every case's input uploaded
    needs_file_store: bool = False  # bench/file_store.py serves every case's input as an object


def vane_variants(workload: str) -> list[Variant]:
    return [
        Variant("vane-thread", f"{workload}_vane.py", "vane", ("--backend", "thread")),
        Variant(
            "vane-subprocess_actor",
            f"{workload}_vane.py",
            "vane",
            ("--backend", "subprocess_actor"),
        ),
    ]


def resume_variant(workload: str) -> Variant:
    """vane-thread writing with ``resume=True``: what keeping each batch's answer costs (issue
    30: <= 3% over vane-thread)."""
    args = ("--backend", "thread", "--resume")
    return Variant("vane-thread-resume", f"{workload}_vane.py", "vane", args)


def peer_variants(workload: str) -> list[Variant]:
    return [
        Variant("daft", f"{workload}_daft.py", "peers"),
        Variant("ray-data", f"{workload}_ray.py", "peers"),
    ]


# The first_rows cases' input (the embed and prompt workloads' full-size files: a first row must
# not wait on the rest) and arguments; they write nothing.
EMBED_FIRST = ("sentences", 20_000, ("--batch-size", "64"), False)
PROMPT_FIRST = ("sentences", 5_000, ("--in-flight", str(IN_FLIGHT)), False)


def workloads(quick: bool, rows: int | None = None) -> list[Workload]:
    """Every workload at its full size (or quick); ``rows`` replaces the input size of the
    throughput workloads (overhead, prompt, embed), not of memory or first_result."""
    overhead_rows = rows or (200_000 if quick else 2_000_000)
    # Two sizes 10x apart (the target compares them) and, in a full run, a third 3x the second:
    # whether what grows from the first to the second keeps growing or has levelled off.
    memory_rows = (200_000, 2_000_000) if quick else (2_000_000, 20_000_000, 60_000_000)
    embed_rows = rows or (1_000 if quick else 20_000)
    prompt_rows = rows or (500 if quick else 5_000)
    image_rows = rows or (200 if quick else 5_000)
    batch = ("--batch-size", "4096")

    overhead = [
        Variant("duckdb-sql", "overhead_duckdb.py", "vane"),
        Variant("hand-loop", "overhead_handloop.py", "vane"),
        *vane_variants("overhead"),
        resume_variant("overhead"),
        *peer_variants("overhead"),
    ]
    embed = [
        Variant("hand-loop", "embed_handloop.py", "vane"),
        *vane_variants("embed"),
        resume_variant("embed"),
        # The rerun of a resumable write that a kill stopped half-way (issue 30: <= 55% of a
        # full run); the killed run, in a child process, is not timed.
        Variant(
            "vane-thread-resumed-half",
            "embed_vane.py",
            "vane",
            ("--backend", "thread", "--killed-at", "0.5"),
        ),
        # vane on a local Ray cluster (the same ray.init as Ray Data's): the Ray runner's cost
        # against the local runner, on the same model and batches.
        Variant("vane-ray", "embed_vane.py", "vane", ("--runner", "ray")),
        *peer_variants("embed"),
    ]
    prompt = [
        Variant("aiohttp-loop", "prompt_aiohttp.py", "vane"),
        Variant("openai-sdk-loop", "prompt_openai.py", "vane"),
        Variant("vane", "prompt_vane.py", "vane"),
        *peer_variants("prompt"),
    ]
    images = [
        Variant("hand-loop", "images_handloop.py", "vane"),
        *vane_variants("images"),
        *peer_variants("images"),
    ]
    # DuckDB alone (how much its own scan grows with the file), DuckDB streaming its rows out
    # as vane reads them, the hand loop, vane's two local backends, and a partitioned write (a
    # file open per partition value).
    memory = [
        overhead[0],
        Variant("duckdb-stream", "overhead_duckdb_stream.py", "vane"),
        *overhead[1:4],
        Variant(
            "vane-thread-partitioned",
            "overhead_vane.py",
            "vane",
            ("--backend", "thread", "--partitions", "16"),
        ),
    ]
    first = [
        Variant("duckdb", "first_duckdb.py", "vane"),
        Variant("hand-loop", "first_handloop.py", "vane"),
        Variant("vane", "first_vane.py", "vane"),
        Variant("daft", "first_daft.py", "peers"),
        Variant("ray-data", "first_ray.py", "peers"),
    ]
    in_flight = ("--in-flight", str(IN_FLIGHT))
    # vane-thread again on the same rows in DuckDB's row-group size instead of pyarrow's: a
    # control (no target of its own) that tells growth with the input's size from a scan that
    # has few row groups to work on in a small file.
    small_groups = Variant(
        "vane-thread-small-groups", "overhead_vane.py", "vane", ("--backend", "thread")
    )
    memory_inputs = [*((v, "overhead") for v in memory), (small_groups, "overhead_small_groups")]
    memory_cases = [Case(v, kind, rows, batch) for rows in memory_rows for v, kind in memory_inputs]
    # Planning: nothing runs. A 30-step pipeline (its input is not read: the 10-row file is a
    # formality of the driver's), and a folder of many small files at two sizes.
    folder_files = (200, 2_000) if quick else (2_000, 10_000)
    planning = [
        Case(
            Variant("vane-steps", "planning_vane.py", "vane", ("--what", "steps")),
            "overhead",
            10,
            writes=False,
        ),
        *(
            Case(
                Variant("vane-folder", "planning_vane.py", "vane", ("--what", "folder")),
                "files",
                files,
                writes=False,
            )
            for files in folder_files
        ),
    ]
    # The overhead pipeline between objects on the local S3 server (moto), every engine reading
    # and writing the same bucket with its own S3 client; the runs check what they wrote.
    store = [
        Variant("hand-loop", "store_handloop.py", "vane"),
        *vane_variants("store"),
        *peer_variants("store"),
    ]
    # The same pipeline ending in a Lance dataset on the store (issue 27: "-> Lance"), every
    # engine with its own write_lance (the hand loop: lance.write_dataset over the batches).
    # (Not Ray Data: its write_lance needs a pylance that Daft's cannot share a venv with,
    # bench/requirements-peers.txt.)
    lance = ("--lance",)
    store_lance = [
        Variant(v.name, v.script, v.venv, v.args + lance) for v in store if v.name != "ray-data"
    ]
    # Large objects (issue 27): the first row of one object of about 2 GB in a full run, and
    # the store pipeline (written to local disk) over one object and over ten, whose peaks
    # should match. Served from disk by bench/file_store.py: moto copies a whole object for
    # every request, a footer's included, which would measure moto.
    large_rows = 4_000_000 if quick else 96_000_000
    from_store = ("--store",)
    store_first = [
        Variant("hand-loop", "first_handloop.py", "vane", from_store),
        Variant("vane", "first_vane.py", "vane", from_store),
        Variant("daft", "first_daft.py", "peers", from_store),
        Variant("ray-data", "first_ray.py", "peers", from_store),
    ]
    object_rows = 500_000 if quick else 10_000_000
    store_memory = [
        Case(replace(v, args=(*v.args, "--local-out")), kind, rows, batch)
        for kind, rows in (("overhead", object_rows), ("overhead_x10", 10 * object_rows))
        for v in vane_variants("store")
    ]
    # Seconds to the first rows of the embed and prompt pipelines (issue 31), against the hand
    # loops' first rows: the model's load (embed) or the first answer (prompt) included.
    first_flag = ("--first",)
    first_rows = [
        Case(Variant("embed-hand-loop", "embed_handloop.py", "vane", first_flag), *EMBED_FIRST),
        Case(Variant("embed-vane", "embed_vane.py", "vane", first_flag), *EMBED_FIRST),
        Case(
            Variant("embed-vane-ray", "embed_vane.py", "vane", ("--runner", "ray", *first_flag)),
            *EMBED_FIRST,
        ),
        # The same on Ray for a session's next action, its step's actors kept from the last
        Case(
            Variant(
                "embed-vane-ray-kept",
                "embed_vane.py",
                "vane",
                ("--runner", "ray", *first_flag, "--kept"),
            ),
            *EMBED_FIRST,
        ),
    ]
    first_prompt_rows = [
        Case(
            Variant("prompt-aiohttp-loop", "prompt_aiohttp.py", "vane", first_flag), *PROMPT_FIRST
        ),
        Case(Variant("prompt-vane", "prompt_vane.py", "vane", first_flag), *PROMPT_FIRST),
    ]
    busy_rows = rows or (2_000 if quick else 50_000)
    busy = ("--in-flight", str(BUSY_IN_FLIGHT))
    prompt_busy = [v for v in prompt if v.name in ("aiohttp-loop", "vane")]
    # Four CPU-side actors, the model in each of them or in one server they share (issue 29).
    serve = [
        Variant("vane-actors", "serve_vane.py", "vane", ("--mode", "actors")),
        Variant("vane-server", "serve_vane.py", "vane", ("--mode", "server")),
    ]
    serve_rows = rows or (1_000 if quick else 5_000)
    return [
        Workload("overhead", [Case(v, "overhead", overhead_rows, batch) for v in overhead]),
        Workload("planning", planning),
        Workload(
            "serve", [Case(v, "sentences", serve_rows, ("--batch-size", "64")) for v in serve]
        ),
        Workload(
            "store",
            [Case(v, "overhead", overhead_rows, batch, writes=False) for v in store],
            needs_store=True,
        ),
        Workload(
            "store_lance",
            [Case(v, "overhead", overhead_rows, batch, writes=False) for v in store_lance],
            needs_store=True,
        ),
        Workload(
            "store_first",
            [Case(v, "overhead", large_rows, writes=False) for v in store_first],
            needs_file_store=True,
        ),
        Workload("store_memory", store_memory, needs_file_store=True),
        Workload("memory", memory_cases),
        Workload("first_result", [Case(v, "overhead", 10, writes=False) for v in first]),
        Workload(
            "prompt",
            [Case(v, "sentences", prompt_rows, in_flight) for v in prompt],
            needs_server=True,
        ),
        Workload(
            "prompt_busy",
            [Case(v, "sentences", busy_rows, busy) for v in prompt_busy],
            needs_server=True,
            latency=BUSY_LATENCY,
        ),
        Workload(
            "embed", [Case(v, "sentences", embed_rows, ("--batch-size", "64")) for v in embed]
        ),
        Workload("first_rows", first_rows),
        Workload("first_rows_prompt", first_prompt_rows, needs_server=True),
        Workload("images", [Case(v, "images", image_rows, ("--batch-size", "32")) for v in images]),
    ]


# ---- one run -------------------------------------------------------------------------------------


class TreeSampler(threading.Thread):
    """Peak resident memory of a process and all its descendants, sampled until stopped."""

    def __init__(self, root: psutil.Process) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.root = root
        self.seen: dict[int, psutil.Process] = {root.pid: root}
        self.peak = 0
        self.stopped = threading.Event()

    def sample(self) -> None:
        with contextlib.suppress(psutil.Error):
            for child in self.root.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        total = 0
        for pid, process in list(self.seen.items()):
            try:
                # is_running() compares the start time too, so a reused pid is not counted.
                if not process.is_running():
                    raise psutil.NoSuchProcess(pid)
                total += process.memory_info().rss
            except psutil.Error:
                del self.seen[pid]
        self.peak = max(self.peak, total)

    def run(self) -> None:
        while not self.stopped.is_set():
            self.sample()
            self.stopped.wait(SAMPLE_EVERY)

    def leftovers(self) -> list[psutil.Process]:
        alive = []
        for process in self.seen.values():
            with contextlib.suppress(psutil.Error):
                if process.pid != self.root.pid and process.is_running():
                    alive.append(process)
        return alive


def stop_processes(processes: list[psutil.Process]) -> None:
    """End processes that a run started and left behind: TERM, then KILL after 5 s."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=5)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()


def count_rows(out: Path) -> int:
    files = [
        f for f in out.rglob("*.parquet") if not any(p.startswith((".", "_")) for p in f.parts[-2:])
    ]
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def variant_env() -> dict[str, str]:
    env = dict(os.environ)
    # Worker processes (vane's subprocess actors, Ray's workers) import benchlib by name.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(VARIANTS), env.get("PYTHONPATH")) if p)
    env["HF_HUB_OFFLINE"] = "1"
    return env


def run_case(
    workload: str, case: Case, repetition: int, extra: tuple[str, ...], timeout: float
) -> dict[str, Any]:
    """Run one case once; return its record (the variant's JSON plus what the driver saw)."""
    slug = f"{workload}-{case.variant.name}-{case.rows}-{repetition}"
    out, stdout_path, stderr_path = WORK / slug, WORK / f"{slug}.out", WORK / f"{slug}.log"
    shutil.rmtree(out, ignore_errors=True)
    record: dict[str, Any] = {
        "workload": workload,
        "variant": case.variant.name,
        "case": case.label,
        "input_rows": case.rows,
        "repetition": repetition,
        "load_1m_before": os.getloadavg()[0],  # the machine is shared: say how busy it was
    }
    python = INTERPRETERS[case.variant.venv]
    if not python.exists():
        record["error"] = f"interpreter {python} is missing (make bench creates it)"
        return record
    command = [
        str(python),
        str(VARIANTS / case.variant.script),
        *("--data", str(data.ensure(case.kind, case.rows)), "--out", str(out)),
        *("--rows", str(case.rows), *case.variant.args, *case.args, *extra),
    ]
    record.update(launch(command, stdout_path, stderr_path, timeout))
    driver_error = record.pop("error", None)  # a timeout outranks what the variant said
    lines = [line for line in stdout_path.read_text().splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1])
        record.update({k: v for k, v in result.items() if k not in ("workload", "variant")})
    except (IndexError, json.JSONDecodeError):
        tail = stderr_path.read_text(errors="replace").strip().splitlines()[-3:]
        record["error"] = f"exit {record['returncode']}, no result: {' | '.join(tail)}"
    if driver_error:
        record["error"] = driver_error
    if case.writes and "error" not in record:
        record["verified_rows"] = count_rows(out) if out.exists() else 0
        if record["verified_rows"] != case.rows:
            record["error"] = f"wrote {record['verified_rows']} rows, expected {case.rows}"
    shutil.rmtree(out, ignore_errors=True)
    if "error" in record:
        record["log"] = str(stderr_path.relative_to(ROOT))
    else:
        stdout_path.unlink()
        stderr_path.unlink()
    return record


def launch(
    command: list[str], stdout_path: Path, stderr_path: Path, timeout: float
) -> dict[str, Any]:
    """Run a variant's process to its end, sampling its tree's memory; stop it at ``timeout``
    and end whatever it left running."""
    seen: dict[str, Any] = {}
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(
            command, cwd=ROOT, env=variant_env(), stdout=stdout, stderr=stderr
        )
        sampler = TreeSampler(psutil.Process(process.pid))
        sampler.start()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            seen["error"] = f"timed out after {timeout:.0f} s"
            stop_processes([*sampler.leftovers(), sampler.root])
            process.wait()
        seen["wall_s"] = time.perf_counter() - started
        sampler.stopped.set()
        sampler.join()
    leftovers = sampler.leftovers()
    if leftovers:
        seen["leftover_processes"] = len(leftovers)
        stop_processes(leftovers)
    seen.update(peak_rss_bytes=sampler.peak, returncode=process.returncode)
    return seen


# ---- the prompt server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prompt_server(latency: float) -> Iterator[str]:
    """vane.testing's OpenAIServer (see prompt_server.py) in its own process, with vane's
    interpreter, answering each request after ``latency`` seconds."""
    port = free_port()
    log = open(WORK / "prompt_server.log", "wb")  # noqa: SIM115 -- closed in finally
    command = [str(INTERPRETERS["vane"]), str(BENCH / "prompt_server.py")]
    server = subprocess.Popen(
        [*command, "--port", str(port), "--latency", str(latency)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        if "serving" not in line:
            raise RuntimeError(f"the prompt server did not start: {line!r}, see {log.name}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


STORE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def object_store(inputs: list[Path]) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 in its own process (objects in its memory), a bucket
    ``bench`` holding ``inputs`` under ``inputs/``, and the variables every S3 client reads
    (AWS_ENDPOINT_URL and test credentials) set for the variants while it runs."""
    import pyarrow.fs as pafs

    moto = [str(INTERPRETERS["vane"].parent / "moto_server"), "-H", "127.0.0.1", "-p"]
    with s3_endpoint(moto, "object_store") as endpoint:
        fs = pafs.S3FileSystem(
            endpoint_override=endpoint.removeprefix("http://"),
            scheme="http",
            access_key=STORE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=STORE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region=STORE_CREDENTIALS["AWS_DEFAULT_REGION"],
            allow_bucket_creation=True,
        )
        fs.create_dir("bench")
        for path in dict.fromkeys(inputs):
            pafs.copy_files(str(path), f"bench/inputs/{path.name}", destination_filesystem=fs)
        yield endpoint


@contextlib.contextmanager
def file_store(inputs: list[Path]) -> Iterator[str]:
    """bench/file_store.py on 127.0.0.1: a bucket ``bench`` whose ``inputs/`` are links to
    ``inputs`` (files, or folders of them), read from disk; the variables every S3 client
    reads set for the variants while it runs, as ``object_store`` does."""
    root = WORK / "file-store"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bench" / "inputs").mkdir(parents=True)
    for path in dict.fromkeys(inputs):
        (root / "bench" / "inputs" / path.name).symlink_to(path.resolve())
    command = [str(INTERPRETERS["vane"]), str(BENCH / "file_store.py"), "--root", str(root)]
    try:
        with s3_endpoint([*command, "--port"], "file_store") as endpoint:
            yield endpoint
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def s3_endpoint(command: list[str], name: str) -> Iterator[str]:
    """An S3 server started as ``command`` + a free port, its output in ``<name>.log``, with
    the variables every S3 client reads pointed at it until it stops."""
    port = free_port()
    log = open(WORK / f"{name}.log", "wb")  # noqa: SIM115 -- closed in finally
    server = subprocess.Popen([*command, str(port)], cwd=ROOT, stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        with store_environment(endpoint):
            wait_for(endpoint, server, log.name)
            yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@contextlib.contextmanager
def store_environment(endpoint: str) -> Iterator[None]:
    """AWS_ENDPOINT_URL and the test credentials, for the variants; the old values after."""
    saved = {k: os.environ.get(k) for k in [*STORE_CREDENTIALS, "AWS_ENDPOINT_URL"]}
    os.environ.update(STORE_CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def wait_for(endpoint: str, server: subprocess.Popen[bytes], log: str) -> None:
    """Until the server at ``endpoint`` answers (up to a minute), or has exited."""
    for _ in range(300):
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answered, with an error: it is up
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"the S3 server exited, see {log}") from None
            time.sleep(0.2)
    raise RuntimeError(f"the S3 server at {endpoint} did not answer in a minute, see {log}")


def server_stats(base_url: str) -> dict[str, Any]:
    """Requests answered and the most in flight since the last call (which this resets)."""
    url = base_url.removesuffix("/v1") + "/bench/stats"
    with urllib.request.urlopen(url, timeout=30) as response:
        stats = json.loads(response.read())
    return {"server_requests": stats["requests"], "server_max_in_flight": stats["max_in_flight"]}


# ---- the whole suite -----------------------------------------------------------------------------


VANE_DISTS = [
    "vane-data",
    "duckdb",
    "pyarrow",
    "torch",
    "sentence-transformers",
    "aiohttp",
    "openai",
]
PEER_DISTS = ["daft", "ray", "pyarrow", "torch", "sentence-transformers", "aiohttp", "openai"]
VERSION_PROBE = """
import importlib.metadata as m, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = m.version(name)
    except m.PackageNotFoundError:
        found[name] = None
print(json.dumps({"python": sys.version.split()[0], "packages": found}))
"""


def versions(venv: str, dists: list[str]) -> dict[str, Any]:
    python = INTERPRETERS[venv]
    if not python.exists():
        return {"error": f"{python} is missing"}
    probe = subprocess.run(
        [str(python), "-c", VERSION_PROBE, *dists], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return {"error": probe.stderr.strip().splitlines()[-1:]}
    return dict(json.loads(probe.stdout))


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()),
        "git_commit": commit,
    }


def compile_sources() -> None:
    """Write the bytecode of vane and of the variant scripts' shared module, as installing a
    wheel does. The peers in .bench-venv were installed by pip, which compiles them; vane is
    installed from this checkout (editable) and, where PYTHONDONTWRITEBYTECODE is set, would
    otherwise be compiled again inside every timed run (measured: 70-90 ms of the 0.3 s to a
    first result)."""
    for directory in (ROOT / "vane", VARIANTS):
        compileall.compile_dir(directory, quiet=1)


def arguments() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each")
    parser.add_argument("--repetitions", type=int, help="runs of each variant (3; quick: 1)")
    parser.add_argument("--only", nargs="*", help="run only these workloads")
    parser.add_argument(
        "--variants", nargs="*", help="run only these variants of the workloads (an A/B run)"
    )
    parser.add_argument("--timeout", type=float, help="seconds before a run is stopped")
    parser.add_argument(
        "--rows", type=int, help="input rows of the throughput workloads (overhead, prompt, embed)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=BENCH,
        help="directory for results.json and RESULTS.md (default bench/: a partial run written "
        "elsewhere leaves the suite's results as they are)",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="a partial run (--only) whose workloads replace theirs in the results.json already "
        "in --output, every other workload's runs kept; RESULTS.md says which run each came from",
    )
    args = parser.parse_args()
    if args.replace and (args.variants or args.quick or args.rows or not args.only):
        parser.error(
            "--replace takes whole workloads (--only) at full size: no --variants, "
            "--quick or --rows"
        )
    return parser, args


def main() -> None:
    parser, args = arguments()
    repetitions = args.repetitions or (1 if args.quick else 3)
    timeout = args.timeout or (900.0 if args.quick else 3600.0)
    suite = [w for w in workloads(args.quick, args.rows) if not args.only or w.name in args.only]
    for workload in suite if args.variants else []:
        workload.cases = [c for c in workload.cases if c.variant.name in args.variants]
    WORK.mkdir(parents=True, exist_ok=True)
    args.output.mkdir(parents=True, exist_ok=True)
    compile_sources()
    results_json = args.output / "results.json"
    # A --replace run writes its progress beside the suite's results, which stay as they are
    # until it ends (an interrupted rerun loses only itself).
    progress_json = args.output / "results.replacing.json" if args.replace else results_json
    replacing = json.loads(results_json.read_text()) if args.replace else None

    results: dict[str, Any] = {
        "quick": args.quick,
        "repetitions": repetitions,
        "command": " ".join(["bench/run.py", *sys.argv[1:]]),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": {"vane venv": versions("vane", VANE_DISTS)}
        | {".bench-venv": versions("peers", PEER_DISTS)},
        "settings": {
            "prompt_latency_s": PROMPT_LATENCY,
            "in_flight": IN_FLIGHT,
            "busy_latency_s": BUSY_LATENCY,
            "busy_in_flight": BUSY_IN_FLIGHT,
            "sample_every_s": SAMPLE_EVERY,
        },
        "workloads": {w.name: [c.label for c in w.cases] for w in suite},
        "runs": [],
    }
    if replacing is not None:
        refused = report.unlike(replacing, results)
        if refused:
            parser.error(f"--replace: {refused}; rerun the whole suite")
    for workload in suite:
        for case in workload.cases:  # generate every input before the first timed run
            data.ensure(case.kind, case.rows)
        server = (
            prompt_server(workload.latency)
            if workload.needs_server
            else contextlib.nullcontext(None)
        )
        inputs = [data.ensure(case.kind, case.rows) for case in workload.cases]
        store: contextlib.AbstractContextManager[str | None] = contextlib.nullcontext(None)
        if workload.needs_store:
            store = object_store(inputs)
        elif workload.needs_file_store:
            store = file_store(inputs)
        with server as base_url, store:
            extra = ("--base-url", base_url) if base_url else ()
            for repetition in range(repetitions):
                for case in workload.cases:
                    if base_url:
                        server_stats(base_url)  # count this run's requests only
                    record = run_case(workload.name, case, repetition, extra, timeout)
                    if base_url:
                        record.update(server_stats(base_url), server_latency_s=workload.latency)
                    results["runs"].append(record)
                    print(report.one_line(record), flush=True)
                    progress_json.write_text(json.dumps(results, indent=1) + "\n")
    results["machine"]["load_average_at_end"] = list(os.getloadavg())
    results["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if replacing is not None:
        results = report.replaced(replacing, results)
    results_json.write_text(json.dumps(results, indent=1) + "\n")
    if progress_json != results_json:
        progress_json.unlink()
    (args.output / "RESULTS.md").write_text(report.render(results))
    print(f"wrote {args.output / 'RESULTS.md'} and {results_json}")


if __name__ == "__main__":
    main()
