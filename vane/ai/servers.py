"""Inference servers per node: one warm server that many CPU-side actors share.

Loading a model inside every actor ties CPU parallelism to GPU memory: a model that fits once
per GPU allows one actor per GPU, and the reading, tokenizing and writing around it runs at that
width too. ``serve`` starts one server process per node instead (vLLM, vane's test server, any
command, or a Python function that serves on a port), and ``rel.prompt(..., server=handle)`` /
``embed_text(..., server=handle)`` send each actor's requests to its own node's server through
the OpenAI-compatible provider, so ``concurrency`` is chosen for the CPU work alone::

    with vane.ai.serve(command=["vllm", "serve", "qwen", "--port", "{port}"]) as server:
        rel.prompt("question", server=server, concurrency=8).write_parquet("out/")

What lives here: ``ServerSpec`` (what to run: a command with ``{port}`` and ``{host}``
placeholders), ``NodeServer`` (one server on this node: start it in a process group of its
own, wait for its health check, restart it when it dies, stop it), ``ServerRoute`` (the small
picklable note of where each node's server listens, which travels with the provider to every
actor), and ``Server``, the handle ``serve`` returns (local runner: one ``NodeServer`` in
this process; Ray: one per node, each in an actor, see ``_ray_servers.py``).

A node's server state is a small JSON file next to its log (``starting``, ``up``,
``restarting``, ``failed``, ``stopped``, and how many restarts), written by its supervisor
thread and read by that node's actors when a request fails: they wait for the restarted
server and send the lost request again, or fail with the log's tail when it is not coming back.

No server outlives the driver: each is started through ``_server_process.py``, which the
kernel signals when the thread that started it ends (``PR_SET_PDEATHSIG``) and which then ends
the server's whole process group; ``stop()`` (and leaving the ``with`` block, an error, Ctrl-C,
the interpreter's exit) does the same.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vane.ai._server_process import die_with_parent, load_prctl
from vane.errors import ConfigurationError, ServerError

LOCAL_NODE = "local"
LAUNCHER = str(Path(__file__).with_name("_server_process.py"))
DEFAULT_MAX_RESTARTS = 3
STOP_GRACE_SECONDS = 10.0
LOG_TAIL_LINES = 30
_POLL_SECONDS = 0.1


# ---- what to run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """What runs on each node; picklable (it travels to Ray's node actors)."""

    command: tuple[str, ...]  # "{port}" and "{host}" are filled in on the node
    health: str = "/v1/models"
    api_path: str = "/v1"
    startup_timeout: float = 600.0
    max_restarts: int = DEFAULT_MAX_RESTARTS
    gpus: int = 0
    env: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    function: bytes | None = None  # cloudpickled (function, args, kwargs): the function form
    shown: str = ""  # the command as explain() and errors say it

    def argv(self, host: str, port: int, function_path: str | None) -> list[str]:
        if self.function is not None:
            assert function_path is not None
            return [sys.executable, LAUNCHER, "function", function_path]
        return [part.replace("{port}", str(port)).replace("{host}", host) for part in self.command]


def vllm_command(
    model: str, *, gpus_per_actor: int = 1, host: str = "{host}", **engine: Any
) -> list[str]:
    """The ``vllm serve`` command line for ``model``: ``gpus_per_actor`` becomes
    ``--tensor-parallel-size``, each engine option ``name=value`` becomes ``--name value``
    (underscores as dashes; ``True`` a bare flag, ``False``/``None`` left out, dicts and lists
    as JSON), as ``vllm serve --help`` spells them."""
    if isinstance(gpus_per_actor, bool) or not isinstance(gpus_per_actor, int):
        raise ConfigurationError(
            f"serve(provider='vllm'): gpus_per_actor must be a positive integer, got "
            f"{gpus_per_actor!r}"
        )
    if gpus_per_actor < 1:
        raise ConfigurationError(
            f"serve(provider='vllm'): gpus_per_actor must be >= 1, got {gpus_per_actor}"
        )
    argv = ["vllm", "serve", model, "--host", host, "--port", "{port}"]
    argv += ["--tensor-parallel-size", str(gpus_per_actor)]
    for name, value in engine.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (dict, list, tuple)):
            argv += [flag, json.dumps(value)]
        else:
            argv += [flag, str(value)]
    return argv


# ---- where requests go ---------------------------------------------------------------------


@dataclass(frozen=True)
class NodeEntry:
    node: str
    address: str  # http://host:port
    state_dir: str

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir) / "state.json"


@dataclass(frozen=True)
class ServerRoute:
    """Each node's server: small and picklable, it travels with a provider's descriptor to
    every actor, and the actor sends its requests to its own node's server (``here``)."""

    name: str
    nodes: tuple[NodeEntry, ...]
    api_path: str
    health: str
    model: str | None
    wait_seconds: float  # how long an actor waits for its node's server to come back

    @property
    def base_url(self) -> str:
        return self.nodes[0].address + self.api_path

    def here(self) -> NodeEntry:
        """This process's node's server; on a node without one (a Ray node with no GPUs, say)
        one of the others, the same one for every actor of that node."""
        if len(self.nodes) == 1 or self.nodes[0].node == LOCAL_NODE:
            return self.nodes[0]
        import ray

        node = ray.get_runtime_context().get_node_id()
        for entry in self.nodes:
            if entry.node == node:
                return entry
        return self.nodes[sum(node.encode()) % len(self.nodes)]

    def wait_until_serving(self, entry: NodeEntry) -> int:
        """Block until ``entry``'s server is up and answers its health check again; its
        number of restarts so far. ``ServerError`` when it failed for good, was stopped, or
        stays silent for ``wait_seconds``."""
        deadline = time.monotonic() + self.wait_seconds
        while True:
            state = read_state(entry)
            if state is None or state["state"] == "stopped":
                raise ServerError(
                    f"the server `{self.name}` on node {entry.node} was stopped while a step still "
                    "sent it requests; run the steps that use it inside `with vane.ai.serve(...)`"
                )
            if state["state"] == "failed":
                raise ServerError(str(state.get("message")))
            if state["state"] == "up" and healthy(entry.address + self.health):
                return int(state.get("restarts", 0))
            if time.monotonic() > deadline:
                tail = log_tail(Path(entry.state_dir) / "server.log")
                raise ServerError(
                    f"the server `{self.name}` on node {entry.node} ({entry.address}) has not "
                    f"answered its health check {self.health} for {self.wait_seconds:g} s; "
                    f"the end of its log:\n{tail}"
                )
            time.sleep(0.2)


def read_state(entry: NodeEntry) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(entry.state_path.read_text())
    except (OSError, ValueError):
        return None
    return state


def healthy(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError, ValueError):
        return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    kept = text.splitlines()[-lines:]
    return "\n".join("    " + line for line in kept) if kept else "    (the log is empty)"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# ---- one server on this node ---------------------------------------------------------------


@dataclass
class NodeServer:
    """One server process on this node, kept running until ``stop()``.

    Every process is started by one thread, the supervisor: Linux's parent-death signal follows
    the *thread* that forked, so a server started by a short-lived thread would be signalled
    when that thread ended. The supervisor starts the server, waits for its health check,
    watches it, restarts it (on the same port, so the actors' address stays right) up to
    ``max_restarts`` times, and records each change in the state file."""

    spec: ServerSpec
    node: str = LOCAL_NODE
    host: str = "127.0.0.1"
    gpu_ids: Sequence[str] | None = None  # None: CUDA_VISIBLE_DEVICES left as it is
    state_dir: str = ""
    name: str = "server"
    port: int = 0
    restarts: int = 0
    failure: str | None = None
    _process: subprocess.Popen[bytes] | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _settled: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if not self.state_dir:
            self.state_dir = tempfile.mkdtemp(prefix="vane-server-")
        os.makedirs(self.state_dir, exist_ok=True)
        self.port = self.port or free_port(self.host)

    @property
    def address(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def entry(self) -> NodeEntry:
        return NodeEntry(self.node, self.address, self.state_dir)

    @property
    def log_path(self) -> Path:
        return Path(self.state_dir) / "server.log"

    @property
    def pid(self) -> int | None:
        """The server's process group (the watcher's pid): every process of the server."""
        return None if self._process is None else self._process.pid

    def start(self) -> NodeServer:
        """Start the server and return once it answers its health check; ``ServerError``
        (with the log's tail) when it exits first or stays silent for ``startup_timeout``."""
        self._write("starting")
        self._thread = threading.Thread(target=self._supervise, name=f"vane-{self.name}")
        self._thread.daemon = True
        self._thread.start()
        self._settled.wait()
        if self.failure is not None:
            self.stop()
            raise ServerError(self.failure)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._end_process()
        if self.failure is None:  # a failed server's log stays: its error names the file
            self._write("stopped")
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # ---- the supervisor thread ----------------------------------------------------------------

    def _supervise(self) -> None:
        try:
            while not self._stopping.is_set():
                self._spawn()
                why = self._until_healthy()
                if self._stopping.is_set():
                    return
                if why is None:
                    self._write("up")
                    self._settled.set()
                    why = self._until_exit()
                    if why is None:
                        return  # stopping
                self._end_process()
                if not self._settled.is_set():  # the first start: say so at once
                    self._fail(why)
                    return
                if self.restarts >= self.spec.max_restarts:
                    self._fail(f"{why}, after {self.restarts} restarts")
                    return
                self.restarts += 1
                self._write("restarting")
        except Exception as exc:  # the supervisor's own failure: fail loudly, not silently
            self._fail(f"vane could not run the server: {type(exc).__name__}: {exc}")
        finally:
            self._end_process()
            self._settled.set()

    def _spawn(self) -> None:
        env = dict(os.environ)
        env.update(self.spec.env)
        env["PORT"] = str(self.port)
        if self.gpu_ids is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        function_path = None
        if self.spec.function is not None:
            function_path = os.path.join(self.state_dir, "function.pkl")
            Path(function_path).write_bytes(self.spec.function)
            # the function's own modules (vane's among them) import as they do here
            env["PYTHONPATH"] = os.pathsep.join(
                [p for p in (*sys.path, env.get("PYTHONPATH", "")) if p]
            )
        argv = self.spec.argv(self.host, self.port, function_path)
        load_prctl()
        with open(self.log_path, "ab") as log:
            log.write(f"--- vane: start {self.restarts + 1}: {shlex.join(argv)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [sys.executable, LAUNCHER, "watch", str(os.getpid()), "--", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a group of its own: stopped as a whole
                preexec_fn=die_with_parent,  # noqa: PLW1509 (the point: die with this thread)
            )

    def _until_healthy(self) -> str | None:
        """None once the server answers its health check; else why it did not."""
        assert self._process is not None
        url = self.address + self.spec.health
        deadline = time.monotonic() + self.spec.startup_timeout
        pause = _POLL_SECONDS
        while not self._stopping.is_set():
            code = self._process.poll()
            if code is not None:
                return f"the server exited with {_exit_status(code)} before it answered {url}"
            if healthy(url, timeout=min(5.0, self.spec.startup_timeout)):
                return None
            if time.monotonic() > deadline:
                return (
                    f"the server did not answer its health check {url} within "
                    f"startup_timeout={self.spec.startup_timeout:g} s"
                )
            self._stopping.wait(pause)
            pause = min(pause * 1.5, 1.0)
        return "stopping"

    def _until_exit(self) -> str | None:
        assert self._process is not None
        while not self._stopping.wait(_POLL_SECONDS):
            code = self._process.poll()
            if code is not None:
                return f"the server exited with {_exit_status(code)}"
        return None

    def _end_process(self) -> None:
        """SIGTERM to the server's group, SIGKILL to what is left after the grace period."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_GRACE_SECONDS)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # anything of the group still there
        process.wait()

    def _fail(self, why: str) -> None:
        self.failure = (
            f"the server `{self.name}` on node {self.node} ({self.shown_command}): {why}. The end "
            f"of its log ({self.log_path}):\n{log_tail(self.log_path)}"
        )
        self._write("failed", self.failure)

    @property
    def shown_command(self) -> str:
        return self.spec.shown or shlex.join(self.spec.argv(self.host, self.port, "<function>"))

    def _write(self, state: str, message: str | None = None) -> None:
        record = {"state": state, "restarts": self.restarts, "port": self.port}
        if message is not None:
            record["message"] = message
        temporary = Path(self.state_dir) / f".state.{threading.get_ident()}"
        temporary.write_text(json.dumps(record))
        os.replace(temporary, Path(self.state_dir) / "state.json")


# ---- the handle ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInfo:
    """One node's server, as explain() and the handle's ``nodes`` show it."""

    node: str
    host: str
    port: int
    gpus: tuple[str, ...] | None
    command: str

    def describe(self) -> str:
        gpus = "unchanged" if self.gpus is None else (",".join(self.gpus) or "none")
        return f"node={self.node} port={self.port} gpus={gpus} command: {self.command}"


class Server:
    """The handle ``serve`` returns: a context manager, or ``start()`` / ``stop()``.

    ``base_url`` is this machine's server (the first node's on Ray), ``urls`` each node's,
    ``route`` what a provider takes (``server=`` accepts the handle itself)."""

    def __init__(self, spec: ServerSpec, *, runner: str, name: str) -> None:
        self.spec = spec
        self.runner = runner
        self.name = name
        self._local: NodeServer | None = None
        self._ray: Any = None  # _ray_servers.RayServers
        self._route: ServerRoute | None = None
        self._nodes: tuple[NodeInfo, ...] = ()
        self.failure: str | None = None  # why a server failed for good, once one did

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Server:
        if self._route is not None:
            return self
        wait = self.spec.startup_timeout * (self.spec.max_restarts + 1) + 30
        if self.runner == "ray":
            from vane.ai._ray_servers import RayServers

            self._ray = RayServers(self.spec, self.name)
            entries, self._nodes = self._ray.start()
        else:
            gpu_ids = _local_gpus(self.spec.gpus)
            node = NodeServer(self.spec, gpu_ids=gpu_ids, name=self.name)
            _RUNNING.add(self)
            try:
                node.start()
            except BaseException:
                _RUNNING.discard(self)
                raise
            self._local = node
            entries = (node.entry,)
            shown = tuple(gpu_ids) if gpu_ids is not None else None
            self._nodes = (NodeInfo(node.node, node.host, node.port, shown, node.shown_command),)
        self._route = ServerRoute(
            self.name, entries, self.spec.api_path, self.spec.health, self.spec.model, wait
        )
        return self

    def stop(self) -> None:
        """Stop every node's server (idempotent). It raises nothing: a server that failed for
        good has already failed the steps that sent it requests (``failure`` keeps why)."""
        if self._local is not None:
            self._local.stop()
            self.failure = self._local.failure
            self._local = None
        if self._ray is not None:
            self.failure = self._ray.stop()
            self._ray = None
        _RUNNING.discard(self)
        self._route = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        self.stop()

    # ---- where it listens -------------------------------------------------------------------

    @property
    def route(self) -> ServerRoute:
        if self._route is None:
            raise ConfigurationError(
                f"the server {self.name} is not running: use it inside `with vane.ai.serve(...) "
                "as server:`, or call server.start() first"
            )
        return self._route

    @property
    def base_url(self) -> str:
        return self.route.base_url

    @property
    def urls(self) -> dict[str, str]:
        """Each node's server: node id -> base URL."""
        return {e.node: e.address + self.spec.api_path for e in self.route.nodes}

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._nodes

    @property
    def pids(self) -> dict[str, int]:
        """Each node's server's process group id (local runner: this machine's only)."""
        if self._local is not None and self._local.pid is not None:
            return {self._local.node: self._local.pid}
        return dict(self._ray.pids()) if self._ray is not None else {}

    @property
    def restarts(self) -> int:
        if self._local is not None:
            return self._local.restarts
        return int(self._ray.restarts()) if self._ray is not None else 0

    def describe(self) -> str:
        """The servers as explain() lists them: one line per node."""
        lines = [f"server {self.name} (health {self.spec.health}):"]
        lines += [f"  {info.describe()}" for info in self._nodes] or ["  (not running)"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        state = "running" if self._route is not None else "stopped"
        return f"<vane server {self.name} {state} {[n.port for n in self._nodes]}>"


_RUNNING: set[Server] = set()


@atexit.register
def _stop_all() -> None:
    """Servers a script started and never stopped end with the interpreter."""
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop()


def _local_gpus(count: int) -> list[str] | None:
    """The first ``count`` devices this process may use, for the local server; None (leave
    CUDA_VISIBLE_DEVICES as it is) when the server asks for none."""
    if not count:
        return None
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = [d.strip() for d in (env or "").split(",") if d.strip()] if env is not None else []
    if env is None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            listed = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False
            )
            visible = [str(i) for i, line in enumerate(listed.stdout.splitlines()) if "GPU" in line]
    if len(visible) < count:
        raise ConfigurationError(
            f"serve(gpus={count}): this machine shows {len(visible)} GPUs "
            f"(CUDA_VISIBLE_DEVICES={env!r}); ask for fewer, or run on Ray"
        )
    return visible[:count]


# ---- the public function ---------------------------------------------------------------------


def serve(
    command: Sequence[str] | None = None,
    *,
    function: Callable[..., Any] | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    provider: str | None = None,
    model: str | None = None,
    gpus_per_actor: int | None = None,
    health: str | None = None,
    api_path: str = "/v1",
    startup_timeout: float = 600.0,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    env: Mapping[str, str] | None = None,
    runner: str | None = None,
    name: str | None = None,
    **engine: Any,
) -> Server:
    """A server per node, not started yet: use it as ``with vane.ai.serve(...) as server:``
    (or ``server.start()`` ... ``server.stop()``), and pass ``server=server`` to ``prompt`` or
    ``embed_text``.

    Give one of: ``command`` (a list; ``"{port}"`` becomes the free port vane picked, also in
    the ``PORT`` environment variable, and ``"{host}"`` the address to listen at);
    ``function`` (called as ``function(port, *args, **kwargs)`` in a process of its own, and
    serving until it is ended: the PyTriton pattern); or ``provider="vllm"`` with ``model``,
    ``gpus_per_actor`` (``--tensor-parallel-size``) and engine options as keywords
    (``max_model_len=6600``). ``gpus_per_actor`` is the GPUs each server holds (its
    ``CUDA_VISIBLE_DEVICES``). ``health`` is the path that answers 200 once the server is
    ready (``/v1/models`` unless said; ``/health`` for vLLM); ``startup_timeout`` seconds to
    wait for it; ``max_restarts`` how often a server that dies is started again before the
    job fails. ``runner`` is ``vane.configure``'s unless given: ``"ray"`` starts one server
    on every node with the GPUs asked for.

    >>> import sys, vane
    >>> command = [sys.executable, "-m", "vane.testing.server", "--port", "{port}"]
    >>> with vane.ai.serve(command, health="/health", startup_timeout=60) as server:
    ...     server.base_url.startswith("http://127.0.0.1:")
    True
    """
    forms = [command is not None, function is not None, provider is not None]
    if sum(forms) != 1:
        raise ConfigurationError(
            "serve() takes one of command=[...], function=... or provider='vllm' (with model=)"
        )
    if engine and provider is None:
        raise ConfigurationError(
            f"serve(): unknown options {sorted(engine)}; engine options go with provider='vllm'"
        )
    if isinstance(startup_timeout, bool) or not startup_timeout > 0:
        raise ConfigurationError(f"serve(): startup_timeout must be > 0 s, got {startup_timeout!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ConfigurationError(
            f"serve(): max_restarts must be an integer >= 0, got {max_restarts!r}"
        )
    gpus = gpus_per_actor or 0
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ConfigurationError(f"serve(): gpus_per_actor must be an integer >= 0, got {gpus!r}")
    pickled = None
    if provider is not None:
        if provider != "vllm":
            raise ConfigurationError(
                f"serve(provider={provider!r}): the provider that builds its server command is "
                "'vllm'; for another server pass command=[...]"
            )
        if not model:
            raise ConfigurationError("serve(provider='vllm') needs model=, what vllm serve loads")
        argv = tuple(vllm_command(model, gpus_per_actor=gpus or 1, **engine))
        health = health or "/health"
        gpus = gpus or 1
        shown = shlex.join(argv)
    elif function is not None:
        if not callable(function):
            raise ConfigurationError(f"serve(function=...) takes a callable, got {function!r}")
        import cloudpickle

        pickled = cloudpickle.dumps((function, tuple(args), dict(kwargs or {})))
        argv = ()
        shown = f"{getattr(function, '__qualname__', repr(function))}(port)"
    else:
        if isinstance(command, str) or not command or not all(isinstance(p, str) for p in command):
            raise ConfigurationError(
                f"serve(command=...) takes a list of strings (['vllm', 'serve', ...]), got "
                f"{command!r}"
            )
        argv = tuple(command)
        shown = shlex.join(argv)
    if runner is None:
        from vane.config import get_config

        runner = get_config().runner
    spec = ServerSpec(
        command=argv,
        health=health or "/v1/models",
        api_path=api_path,
        startup_timeout=float(startup_timeout),
        max_restarts=max_restarts,
        gpus=gpus,
        env=tuple((str(k), str(v)) for k, v in (env or {}).items()),
        model=model,
        function=pickled,
        shown=shown,
    )
    return Server(spec, runner=runner, name=name or _default_name(argv, shown))


def _default_name(argv: Sequence[str], shown: str) -> str:
    """A name that stays the same from run to run for the same server (the response cache
    keys answers by it): the program's name and a digest of the command, ports unfilled."""
    program = os.path.basename(argv[0]) if argv else "function"
    if program.startswith("python") and len(argv) > 2 and argv[1] == "-m":
        program = argv[2].rsplit(".", 1)[-1]
    return f"{program}-{hashlib.sha256(shown.encode()).hexdigest()[:6]}"
