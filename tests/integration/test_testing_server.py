"""vane.testing ships the OpenAI-compatible server vane's own tests use, so users can test their
prompt and embed pipelines against a real HTTP server on 127.0.0.1: in-process, or as
``python -m vane.testing.server``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request

import vane
from vane.testing import OpenAIServer
from vane.testing.server import Behaviour


def test_the_server_answers_prompts_in_process():
    server = OpenAIServer().start()
    try:
        rel = vane.from_pydict({"q": ["hello", "world"]})
        out = rel.prompt("q", base_url=server.base_url, api_key="k", model="m").to_pylist()
    finally:
        server.stop()
    assert [r["response"] for r in out] == ["answer to: hello", "answer to: world"]
    assert server.requests == 2


def test_a_held_server_answers_nothing_until_released():
    server = OpenAIServer(Behaviour(hold=True)).start()
    try:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        ask = urllib.request.Request(
            f"{server.base_url}/chat/completions", body.encode(), {"Content-Type": "text/json"}
        )
        replies: list[dict] = []
        asking = threading.Thread(
            target=lambda: replies.append(json.loads(urllib.request.urlopen(ask).read()))
        )
        asking.start()
        while server.in_flight == 0:  # arrived, and held
            asking.join(0.02)
        assert replies == []
        release = urllib.request.Request(f"{server.base_url[:-3]}/release", method="POST")
        urllib.request.urlopen(release).close()
        asking.join()
    finally:
        server.stop()
    assert replies[0]["choices"][0]["message"]["content"] == "answer to: hi"


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
