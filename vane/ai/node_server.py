"""One server on one node, and the route that leads each actor to its node's server.

``ServerSpec`` is what to run (a command with ``{port}`` and ``{host}`` placeholders, or a
cloudpickled function). ``NodeServer`` runs it on this node: starts it in a process group of
its own under ``_server_process.py``, waits for its health check, restarts it (on the same
port) when it dies, up to ``max_restarts``, and stops it. ``ServerRoute`` is the small
picklable note of where each node's server listens, which travels with a provider to every
actor; ``wait_until_serving`` is what an actor does when a request to its server failed.

A node's server state is a JSON file next to its log (``starting``, ``up``, ``restarting``,
``failed``, ``stopped``, and how many restarts), written by the supervisor thread and read by
that node's actors: the one channel between them that needs no connection of its own.
"""

from __future__ import annotations

import contextlib
import http.client
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vane._environ import NODE_ID_ENV
from vane.ai._server_process import die_with_parent, load_prctl
from vane.errors import ServerError

LOCAL_NODE = "local"
LAUNCHER = str(Path(__file__).with_name("_server_process.py"))
DEFAULT_MAX_RESTARTS = 3
STOP_GRACE_SECONDS = 10.0
LOG_TAIL_LINES = 30
_POLL_SECONDS = 0.1
HEALTH_INTERVAL_SECONDS = 5.0  # how often a running server's health is checked


# ---- what to run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """What runs on each node; picklable (it travels to Ray's node actors)."""

    command: tuple[str, ...]  # "{port}" and "{host}" are filled in on the node
    health: str = "/v1/models"
    api_path: str = "/v1"
    startup_timeout: float = 600.0
    # a running server that fails its health check this long is ended and restarted (a vLLM
    # whose engine died answers /health with an error while its API process lives on)
    unhealthy_timeout: float = 60.0
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

    def __vane_identity__(self) -> str:
        """What a resumable write knows this route by: the server, not the port it got."""
        return f"server {self.name} {self.api_path} {self.model}"

    def url(self) -> str:
        """The base URL of the server on this process's node: what a UDF of your own that
        talks to the server asks for in its ``__init__`` (the route travels with it, the
        handle does not)."""
        return self.here().address + self.api_path

    def here(self) -> NodeEntry:
        """This process's node's server; on a node without one (a Ray node with no GPUs, say)
        one of the others, the same one for every actor of that node."""
        if len(self.nodes) == 1 or self.nodes[0].node == LOCAL_NODE:
            return self.nodes[0]
        node = os.environ.get(NODE_ID_ENV)  # a UDF's worker under a Ray actor
        if node is None:
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


# Straight to the server: a proxy in the environment (http_proxy) is not on the way to it.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url`` answers 200. Anything else is "not yet", a reply that is not HTTP
    included: the port may be another program's meanwhile (a free port is free only when it
    is picked; a cluster starting beside us took one, and its binary reply failed the start
    with http.client's BadStatusLine instead of waiting for the server)."""
    try:
        with _DIRECT.open(url, timeout=timeout) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError, ValueError, http.client.HTTPException):
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
        try:
            self._settled.wait()
        except BaseException:  # Ctrl-C while it starts: nothing of it may stay
            self.stop()
            raise
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
        env["HOST"] = self.host  # where to listen: 127.0.0.1 locally, the node's address on Ray
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
        """Why the running server is to be restarted (it exited, or has failed its health
        check for ``unhealthy_timeout``); None once it is stopping."""
        assert self._process is not None
        url = self.address + self.spec.health
        answered = checked = time.monotonic()
        interval = min(HEALTH_INTERVAL_SECONDS, self.spec.unhealthy_timeout / 4)
        while not self._stopping.wait(_POLL_SECONDS):
            code = self._process.poll()
            if code is not None:
                return f"the server exited with {_exit_status(code)}"
            now = time.monotonic()
            if now - checked < interval:
                continue
            checked = now
            if healthy(url, timeout=interval):
                answered = time.monotonic()
            elif time.monotonic() - answered > self.spec.unhealthy_timeout:
                return (
                    f"the server stopped answering its health check {url} (for more than "
                    f"unhealthy_timeout={self.spec.unhealthy_timeout:g} s)"
                )
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
        if self.spec.function is not None:
            return self.spec.shown
        return shlex.join(self.spec.argv(self.host, self.port, None))

    def _write(self, state: str, message: str | None = None) -> None:
        record = {"state": state, "restarts": self.restarts, "port": self.port}
        if message is not None:
            record["message"] = message
        temporary = Path(self.state_dir) / f".state.{threading.get_ident()}"
        temporary.write_text(json.dumps(record))
        os.replace(temporary, Path(self.state_dir) / "state.json")


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
