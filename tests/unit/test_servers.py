"""``vane.ai.serve``'s arguments, the vLLM command it builds, and where the explain text names
servers; nothing is started here (tests/integration/test_servers.py starts real servers)."""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vane
import vane.ai
from vane.ai.node_server import ServerRoute
from vane.ai.servers import describe_used, vllm_command
from vane.errors import ConfigurationError

names = st.from_regex(r"[a-z][a-z0-9]{0,8}(_[a-z0-9]{1,6}){0,2}", fullmatch=True)
values = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(-(10**6), 10**6),
    st.floats(0.01, 100, allow_nan=False).map(lambda x: round(x, 3)),
    st.text("abcxyz-./0123456789", min_size=1, max_size=12),
    st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers(0, 9), max_size=2),
)


@given(st.dictionaries(names, values, max_size=6), st.integers(1, 8))
def test_every_engine_option_becomes_its_vllm_flag(engine, gpus):
    argv = vllm_command("org/model", gpus_per_actor=gpus, **engine)
    assert argv[:7] == ["vllm", "serve", "org/model", "--host", "{host}", "--port", "{port}"]
    assert argv[7:9] == ["--tensor-parallel-size", str(gpus)]
    rest = argv[9:]
    for name, value in engine.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            assert flag not in rest
        elif value is True:
            assert flag in rest and (
                rest.index(flag) + 1 == len(rest) or rest[rest.index(flag) + 1].startswith("--")
            )
        else:
            shown = rest[rest.index(flag) + 1]
            assert shown == (str(value) if not isinstance(value, dict) else json.dumps(value))


def test_serve_with_vllm_builds_the_command_and_holds_its_gpus():
    server = vane.ai.serve(
        provider="vllm",
        model="Qwen/Qwen2.5-7B",
        gpus_per_actor=2,
        max_model_len=6600,
        enforce_eager=True,
        runner="local",
    )
    assert shlex.split(server.command) == [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "6600",
        "--enforce-eager",
    ]
    assert server.spec.gpus == 2 and server.spec.health == "/health"
    assert server.spec.model == "Qwen/Qwen2.5-7B"  # what prompt(server=...) asks for
    assert "not running" in repr(server) or "stopped" in repr(server)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({}, "one of command="),
        ({"command": ["a"], "function": print}, "one of command="),
        ({"command": "vllm serve m"}, "list of strings"),
        ({"command": ["a"], "max_model_len": 5}, "engine options go with provider='vllm'"),
        ({"provider": "sglang", "model": "m"}, "'vllm'"),
        ({"provider": "vllm"}, "needs model="),
        ({"command": ["a"], "startup_timeout": 0}, "startup_timeout must be > 0"),
        ({"command": ["a"], "unhealthy_timeout": "60"}, "unhealthy_timeout must be > 0"),
        ({"command": ["a"], "max_restarts": -1}, "max_restarts must be an integer >= 0"),
        ({"provider": "vllm", "model": "m", "gpus_per_actor": 1.5}, "gpus_per_actor"),
        ({"function": 3}, "takes a callable"),
        ({"command": ["a"], "nodes": ["n1"], "runner": "local"}, "chooses Ray nodes"),
    ],
)
def test_bad_arguments_say_what_to_pass(kwargs, says):
    with pytest.raises(ConfigurationError, match=says):
        vane.ai.serve(**kwargs)


def test_a_server_not_started_is_a_clear_error_where_a_step_takes_it():
    server = vane.ai.serve([sys.executable, "-m", "vane.testing.server", "--port", "{port}"])
    rel = vane.from_pydict({"q": ["a"]})
    with pytest.raises(ConfigurationError, match=r"not running: use it inside `with vane\.ai"):
        rel.prompt("q", server=server, model="m")
    with pytest.raises(ConfigurationError, match="not both"):
        rel.prompt("q", server=_route(), model="m", base_url="http://x/v1")
    with pytest.raises(ConfigurationError, match="the server holds the GPUs"):
        rel.prompt("q", server=_route(), model="m", gpus_per_actor=1)


def test_the_default_name_is_stable_and_the_route_is_the_model_default():
    one = vane.ai.serve([sys.executable, "-m", "vane.testing.server", "--port", "{port}"])
    two = vane.ai.serve([sys.executable, "-m", "vane.testing.server", "--port", "{port}"])
    assert one.name == two.name and one.name.startswith("server-")  # the cache keys by it
    step = vane.from_pydict({"q": ["a"]}).embed_text("q", server=_route())
    assert "embed_text[openai served-model via tests-server](q)" in step.explain()


def test_explain_lists_only_servers_that_running_steps_name():
    text = "WithColumn r = prompt[openai m via nobody-123](q)"
    assert describe_used(text) == ""  # no such server running


def _route() -> ServerRoute:
    from vane.ai.node_server import NodeEntry

    node = NodeEntry("local", "http://127.0.0.1:9", "/nonexistent")
    return ServerRoute("tests-server", (node,), "/v1", "/health", "served-model", 1.0)


def test_the_handle_stays_in_the_driver_and_says_what_travels():
    import pickle

    server = vane.ai.serve([sys.executable, "-m", "vane.testing.server", "--port", "{port}"])
    with pytest.raises(ConfigurationError, match=r"server\.route"):
        pickle.dumps(server)
    assert pickle.loads(pickle.dumps(_route())) == _route()  # the route travels


@contextlib.contextmanager
def _answering(reply: bytes) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a listener that answers its first request with
    ``reply``: a program on the port that does not speak HTTP."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer() -> None:
            peer, _ = listener.accept()
            with peer:
                peer.recv(4096)
                peer.sendall(reply + b"\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
        thread.join(10)


@given(reply=st.binary(min_size=1, max_size=64).filter(lambda b: not b.startswith(b"HTTP/")))
def test_a_port_that_answers_something_else_than_http_is_not_healthy_yet(reply):
    # A free port is free only when it is picked: before the server listens on it, another
    # program (a Ray cluster starting beside it) may answer there. Before: BadStatusLine
    # failed the server's start instead of waiting for it.
    from vane.ai.node_server import healthy

    with _answering(reply) as address:
        assert healthy(f"{address}/health", timeout=10) is False


def test_a_file_url_whose_server_does_not_speak_http_is_a_source_error():
    from vane.errors import SourceError
    from vane.types.files import File

    with (
        _answering(b"\x00\x00\x12\x04not http") as address,
        pytest.raises(SourceError, match="cannot open the file"),
    ):
        File(f"{address}/a.jpg").read()
