"""vane.testing ships the OpenAI-compatible server vane's own tests use, so users can test their
prompt and embed pipelines against a real HTTP server on 127.0.0.1: in-process, or as
``python -m vane.testing.server``."""

from __future__ import annotations

import subprocess
import sys

import vane
from vane.testing import OpenAIServer


def test_the_server_answers_prompts_in_process():
    server = OpenAIServer().start()
    try:
        rel = vane.from_pydict({"q": ["hello", "world"]})
        out = rel.prompt("q", base_url=server.base_url, api_key="k", model="m").to_pylist()
    finally:
        server.stop()
    assert [r["response"] for r in out] == ["answer to: hello", "answer to: world"]
    assert server.requests == 2


def test_the_server_runs_as_a_command():
    command = [sys.executable, "-m", "vane.testing.server", "--port", "0", "--latency", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:")
        base_url = line.split()[1]
        out = vane.from_pydict({"t": ["a b"]}).embed_text(
            "t", provider="openai", base_url=base_url, api_key="k", model="e", dimensions=4
        )
        assert len(out.to_pylist()[0]["embedding"]) == 4
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_importing_vane_testing_loads_no_http_stack():
    code = "import sys, vane.testing\nprint('aiohttp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
