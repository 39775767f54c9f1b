"""Inference servers per node: one warm server that many CPU-side actors share.

Loading a model inside every actor ties CPU parallelism to GPU memory: a model that fits once
per GPU allows one actor per GPU, and the reading, tokenizing and writing around it runs at that
width too. ``serve`` starts one server process per node instead (vLLM, vane's test server, any
command, or a Python function that serves on a port), and ``rel.prompt(..., server=handle)`` /
``embed_text(..., server=handle)`` send each actor's requests to its own node's server through
the OpenAI-compatible provider, so ``concurrency`` is chosen for the CPU work alone::

    with vane.ai.serve(command=["vllm", "serve", "qwen", "--port", "{port}"]) as server:
        rel.prompt("question", server=server, concurrency=8).write_parquet("out/")

Here: ``serve`` (its arguments checked, the vLLM command built) and ``Server``, the handle it
returns: on the local runner one ``NodeServer`` (``node_server.py``: one server on one node,
kept running) in this process; on Ray one per node, each in an actor (``_ray_servers.py``).
When a request to a node's server fails, that node's actors wait for the restarted server and
send the lost request again, or fail with the log's tail when it is not coming back
(``node_server.ServerRoute``, used by the OpenAI-compatible provider).

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
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vane.ai.node_server import (
    DEFAULT_MAX_RESTARTS,
    NodeInfo,
    NodeServer,
    ServerRoute,
    ServerSpec,
)
from vane.errors import ConfigurationError

# ---- the vLLM command ------------------------------------------------------------------------


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


# ---- the handle ----------------------------------------------------------------------------


class Server:
    """The handle ``serve`` returns: a context manager, or ``start()`` / ``stop()``.

    ``base_url`` is this machine's server (the first node's on Ray), ``urls`` each node's,
    ``route`` what a provider takes (``server=`` accepts the handle itself)."""

    def __init__(
        self, spec: ServerSpec, *, runner: str, name: str, nodes: Sequence[str] | None = None
    ) -> None:
        self.spec = spec
        self.runner = runner
        self.name = name
        self.chosen_nodes = None if nodes is None else tuple(nodes)
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
        _RUNNING.add(self)
        try:
            if self.runner == "ray":
                from vane.ai._ray_servers import RayServers

                self._ray = RayServers(self.spec, self.name, self.chosen_nodes)
                entries, self._nodes = self._ray.start()
            else:
                gpu_ids = _local_gpus(self.spec.gpus)
                node = NodeServer(self.spec, gpu_ids=gpu_ids, name=self.name)
                node.start()
                self._local = node
                entries = (node.entry,)
                gpus = tuple(gpu_ids) if gpu_ids is not None else None
                info = NodeInfo(node.node, node.host, node.port, gpus, node.shown_command)
                self._nodes = (info,)
        except BaseException:  # a failed start (or Ctrl-C meanwhile) leaves nothing running
            self.stop()
            raise
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
        self._nodes = ()

    def __reduce__(self) -> Any:
        raise ConfigurationError(
            f"the handle of server {self.name} stays in the driver; give a UDF of your own "
            "server.route (it travels to every actor: route.url() is its node's server), and "
            "the AI functions server=server"
        )

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
    def command(self) -> str:
        """The command each node runs, ``{port}`` and ``{host}`` still to fill in."""
        return self.spec.shown

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


def describe_used(plan_text: str) -> str:
    """The running servers that steps of ``plan_text`` name (``prompt[openai m via <server>]``),
    each with its nodes, GPUs, ports and command and the steps that use it, as lines to follow
    the plan in ``explain()``; empty when there are none."""
    lines = []
    for server in sorted(_RUNNING, key=lambda s: s.name):
        pattern = re.compile(r"\w+\[[^\[\]]* via " + re.escape(server.name) + r"\]")
        users = sorted(set(pattern.findall(plan_text)))
        if users:
            lines.append(f"{server.describe()}\n  used by: {', '.join(users)}")
    return "".join(f"\n{line}" for line in lines)


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
    unhealthy_timeout: float = 60.0,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    env: Mapping[str, str] | None = None,
    runner: str | None = None,
    nodes: Sequence[str] | None = None,
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
    wait for it; a running server that fails it for ``unhealthy_timeout`` seconds is ended;
    ``max_restarts`` is how often a server that dies (or was ended) is started again before
    the job fails. ``runner`` is ``vane.configure``'s unless given: ``"ray"`` starts one server
    on every node with the GPUs asked for, or on the ``nodes`` given (Ray node ids).

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
    for setting, value in (
        ("startup_timeout", startup_timeout),
        ("unhealthy_timeout", unhealthy_timeout),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigurationError(f"serve(): {setting} must be > 0 s, got {value!r}")
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
        unhealthy_timeout=float(unhealthy_timeout),
        max_restarts=max_restarts,
        gpus=gpus,
        env=tuple((str(k), str(v)) for k, v in (env or {}).items()),
        model=model,
        function=pickled,
        shown=shown,
    )
    if nodes is not None and runner != "ray":
        raise ConfigurationError(
            "serve(nodes=...) chooses Ray nodes; the local runner has one server, on this machine"
        )
    return Server(spec, runner=runner, name=name or _default_name(argv, shown), nodes=nodes)


def _default_name(argv: Sequence[str], shown: str) -> str:
    """A name that stays the same from run to run for the same server (the response cache
    keys answers by it): the program's name and a digest of the command, ports unfilled."""
    program = os.path.basename(argv[0]) if argv else "function"
    if program.startswith("python") and len(argv) > 2 and argv[1] == "-m":
        program = argv[2].rsplit(".", 1)[-1]
    return f"{program}-{hashlib.sha256(shown.encode()).hexdigest()[:6]}"
