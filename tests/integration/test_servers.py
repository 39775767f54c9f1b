"""``vane.ai.serve``: a real server process per node that the AI functions send requests to.

The server is vane's own OpenAI-compatible test server, started as a command and as a Python
function in a process of its own; it counts what it receives (``GET /stats``). Faults are
real: a server killed mid-run (``SIGKILL`` to its process group), one that dies after a few
requests every time, one that never answers its health check, and a driver killed with
``-9`` or interrupted with Ctrl-C, after which no server process may be left. On Ray: a
two-node cluster (``ray_servers.py``) where each node's server holds the node's logical GPU
and receives only that node's requests, and is restarted when killed mid-job; and the
session's cluster for a start that fails and a driver killed with ``-9``.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import vane
import vane.ai
from vane.errors import ConfigurationError, ServerError
from vane.observe.events import ServerCount, ServerRequests, subscribe
from vane.observe.progress import ProgressDisplay
from vane.testing import server as test_server

GONE_WITHIN_S = 60  # a bound for a busy machine, not a measure


def command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "vane.testing.server", "--port", "{port}", *extra]


def stats(server: vane.ai.Server) -> dict:
    address = server.base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{address}/stats", timeout=10) as reply:
        return json.loads(reply.read())


def alive(pid: int) -> bool:
    """Whether a process of the group ``pid`` leads is still there (zombies count as gone)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pid and fields[0] != "Z":  # state, parent, group
            return True
    return False


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GONE_WITHIN_S
    while alive(pid):
        assert time.monotonic() < deadline, f"process group {pid} outlived its driver"
        time.sleep(0.2)


def questions(n: int) -> vane.Relation:
    return vane.from_pydict({"id": list(range(n)), "q": [f"question {i}" for i in range(n)]})


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_command_server_answers_every_row_once_from_every_backend(backend, tmp_path):
    with vane.ai.serve(command("--latency", "0"), health="/health", startup_timeout=60) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        assert list(server.urls.values()) == [server.base_url]
        rel = questions(24)
        out = rel.prompt(
            "q", server=server, model="m", batch_size=6, concurrency=2, execution_backend=backend
        )
        result = out.write_parquet(tmp_path / "out")
        got = vane.read_parquet(str(tmp_path / "out")).to_arrow().to_pylist()
        counted = stats(server)
        (pid,) = server.pids.values()
    assert sorted((r["id"], r["response"]) for r in got) == [
        (i, test_server.answer_for(f"question {i}")) for i in range(24)
    ]
    assert counted["requests"] == 24 and set(counted["by_prompt"].values()) == {1}
    ((step, usage),) = result.usage.items()
    assert "via python" not in step and "via server" in step  # the step names its server
    assert usage["requests"] == 24 and usage.get("retries", 0) == 0
    wait_gone(pid)


def release(server: vane.ai.Server) -> None:
    """Answer every request the test server holds (``--hold``)."""
    address = server.base_url.removesuffix("/v1")
    request = urllib.request.Request(f"{address}/release", method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def wait_for(what: str, check) -> None:
    """Wait until ``check()`` holds: a bound for a busy machine, not a measure."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while not check():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_the_progress_line_shows_the_requests_a_server_holds_in_flight(backend):
    """Six requests held by the server, unanswered: the step's line says so for that server,
    from either backend (a subprocess actor's counts cross its pipe); once they are answered,
    the last counts say none is in flight, and the line is gone with its stage. The plan's
    explain() names the server and the step that uses it."""
    display = ProgressDisplay(io.StringIO())
    counts: list[ServerRequests] = []
    stop_display = subscribe(display)
    stop_counts = subscribe(lambda e: counts.append(e) if isinstance(e, ServerRequests) else None)
    try:
        with vane.ai.serve(command("--hold", "--latency", "0"), health="/health") as server:
            out = questions(6).prompt(
                "q",
                server=server,
                model="m",
                batch_size=3,
                concurrency=2,
                execution_backend=backend,
            )
            # explain() shows the server (node, GPUs, port, command) and the step that uses it
            port = server.nodes[0].port
            assert f"server {server.name} (health /health):\n  node=local port={port} " in (
                out.explain()
            )
            assert f"gpus=unchanged command: {sys.executable} -m vane.testing.server" in (
                out.explain()
            )
            assert f"used by: prompt[openai m via {server.name}]" in out.explain()
            job = threading.Thread(target=out.to_arrow)
            job.start()
            try:
                wait_for("6 requests held", lambda: stats(server)["in_flight"] == 6)
                url = server.base_url
                shown = f"prompt[openai m via {server.name}](q): "  # the step, by its server
                wait_for(shown, lambda: shown in display.text(width=300))
                shown = f"{url}: 6 in flight, 6 sent"
                wait_for(shown, lambda: shown in display.text(width=300))
            finally:
                release(server)
                job.join()
    finally:
        stop_display()
        stop_counts()
    assert counts[-1].servers == (ServerCount(url, 0, 6, 0),)
    assert display.text() == ""  # every stage finished: no line left


def test_a_python_function_server_embeds_and_its_process_ends():
    server = vane.ai.serve(function=test_server.run, kwargs={"latency": 0.0}, startup_timeout=60)
    server.start()
    try:
        texts = questions(10).embed_text("q", server=server, model="m", batch_size=4)
        vectors = {r["id"]: r["embedding"] for r in texts.to_arrow().to_pylist()}
        counted = stats(server)
        (pid,) = server.pids.values()
    finally:
        server.stop()
    assert counted["pid"] != os.getpid()  # its own process
    assert sorted(counted["by_text"]) == sorted(f"question {i}" for i in range(10))
    for i, vector in vectors.items():
        expected = test_server.vector_for(f"question {i}", 8)
        assert vector == pytest.approx(expected, abs=1e-6)
    wait_gone(pid)
    with pytest.raises(ConfigurationError, match="not running"):
        server.base_url  # noqa: B018


@pytest.mark.parametrize("backend", ["thread", "subprocess_actor"])
def test_a_server_killed_mid_run_is_restarted_and_every_row_answered_once(tmp_path, backend):
    rows = 60
    with vane.ai.serve(
        command("--latency", "0.05"), health="/health", startup_timeout=60
    ) as server:
        first_pid = next(iter(server.pids.values()))

        def kill_when_busy() -> None:
            while stats(server)["requests"] < 12 or stats(server)["in_flight"] == 0:
                time.sleep(0.02)
            os.killpg(first_pid, signal.SIGKILL)  # the server and its watcher, as an OOM kill

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        out = questions(rows).prompt(
            "q", server=server, model="m", batch_size=10, concurrency=2, execution_backend=backend
        )
        result = out.write_parquet(tmp_path / "out")
        killer.join()
        restarts = server.restarts
        second_pid = next(iter(server.pids.values()))
    got = vane.read_parquet(str(tmp_path / "out")).to_arrow().to_pylist()
    assert sorted((r["id"], r["response"]) for r in got) == [
        (i, test_server.answer_for(f"question {i}")) for i in range(rows)
    ]
    assert restarts == 1 and second_pid != first_pid
    ((_, usage),) = result.usage.items()
    assert usage["retries"] >= 1  # the requests lost with the server, sent again
    assert usage["requests"] == rows + usage["retries"]
    assert usage.get("failures", 0) == 0
    wait_gone(second_pid)


def test_a_server_that_keeps_dying_fails_the_job_with_its_log(tmp_path):
    server = vane.ai.serve(
        command("--latency", "0.02", "--exit-after", "3"),
        health="/health",
        startup_timeout=60,
        max_restarts=2,
    )
    with server:
        rel = questions(40).prompt("q", server=server, model="m", batch_size=5, on_error="null")
        with pytest.raises(ServerError) as info:
            rel.write_parquet(tmp_path / "out")
    message = str(info.value)
    assert "exited with exit code 3, after 2 restarts" in message
    assert "serving http://127.0.0.1:" in message  # the tail of its log
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_server_that_never_answers_is_a_clear_error_and_leaves_nothing_running():
    sleeper = [
        sys.executable,
        "-c",
        "import os,time; print('loading', os.getpid(), flush=True); time.sleep(600)",
    ]
    with pytest.raises(ServerError) as info:
        vane.ai.serve(sleeper, startup_timeout=1.5).start()
    message = str(info.value)
    assert "did not answer its health check" in message and "startup_timeout=1.5 s" in message
    pid = int(re.search(r"loading (\d+)", message).group(1))  # from the log's tail
    wait_gone(pid)


def test_a_server_that_exits_at_start_says_why_at_once():
    failing = [sys.executable, "-c", "import sys; print('no such model: qwen'); sys.exit(2)"]
    with pytest.raises(ServerError, match=r"(?s)exited with exit code 2 .*no such model: qwen"):
        vane.ai.serve(failing, startup_timeout=600).start()


DRIVER = """
import json, sys, time, vane.ai
command = [sys.executable, "-m", "vane.testing.server", "--port", "{port}"]
with vane.ai.serve(command, health="/health", startup_timeout=60) as server:
    import urllib.request
    stats = json.loads(urllib.request.urlopen(server.base_url[:-3] + "/stats").read())
    print(json.dumps({"group": next(iter(server.pids.values())), "server": stats["pid"]}),
          flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_no_server_outlives_its_driver(tmp_path, how):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    driver = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        pids = json.loads(driver.stdout.readline())
        assert alive(pids["group"])
        driver.send_signal(how)
        driver.wait(GONE_WITHIN_S)
        wait_gone(pids["group"])
        assert not running(pids["server"])
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.ray
@pytest.mark.slow  # a two-node cluster of its own: 40-120 s on a busy 2-core machine
@pytest.mark.timeout(400)
def test_on_ray_each_node_gets_a_server_and_keeps_its_requests(tmp_path):
    pytest.importorskip("ray")
    from tests.integration.ray_servers import ROWS

    out = tmp_path / "out"
    driver = subprocess.run(
        [sys.executable, "-m", "tests.integration.ray_servers", str(out)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert driver.returncode == 0, driver.stdout + driver.stderr
    summary = json.loads(driver.stdout.strip().splitlines()[-1])
    assert len(summary["urls"]) == 2  # a server on each node
    total = 0
    for node, counted in summary["stats"].items():
        # every request this node's server received came from an actor on this node
        assert set(counted["by_client"]) <= {f"vane-data (node {node})"}
        assert counted["cuda_visible_devices"] == "0"  # the node's one GPU, Ray's to give
        total += counted["requests"]
    assert total == ROWS
    # The progress line named each node's server that got requests, and said what it got
    progress = {
        f"{summary['urls'][node]} (node {node[:8]})": [0, counted["requests"], 0]
        for node, counted in summary["stats"].items()
        if counted["requests"]
    }
    assert summary["progress"] == progress, summary["progress"]
    # (Both nodes hold actors, and so far both have always got work; that is Ray Data's to
    # decide, though: an actor that starts late on a busy machine may find none left.)
    rows = vane.read_parquet(str(out)).to_arrow().to_pylist()
    assert sorted((r["id"], r["response"]) for r in rows) == [
        (i, test_server.answer_for(f"question {i}")) for i in range(ROWS)
    ]
    again = vane.read_parquet(str(tmp_path / "again")).to_arrow().to_pylist()
    assert sorted((r["id"], r["response"]) for r in again) == [
        (i, test_server.answer_for(f"question {i}")) for i in range(ROWS)
    ]
    shown = json.dumps({k: v for k, v in summary.items() if k != "stats"})
    assert summary["in_flight_when_killed"], shown
    assert summary["restarts"] == 1, shown
    assert summary["killed"] not in summary["groups"].values(), shown
    assert summary["usage"].get("retries", 0) >= 1, shown
    assert summary["usage"].get("failures", 0) == 0, shown
    for group in [*summary["groups"].values(), summary["killed"]]:
        wait_gone(group)


RAY_DRIVER = """
import json, sys, time, ray, vane.ai
ray.init(address=sys.argv[1])
command = [sys.executable, "-m", "vane.testing.server", "--host", "{host}", "--port", "{port}"]
node = ray.get_runtime_context().get_node_id()
server = vane.ai.serve(command, health="/health", startup_timeout=120, runner="ray",
                       nodes=[node]).start()
assert list(server.urls) == [node]
print(json.dumps(server.pids), flush=True)
time.sleep(600)
"""


@pytest.mark.ray
def test_on_ray_no_server_outlives_a_driver_killed_with_9(ray_cluster, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(RAY_DRIVER))
    address = ray_cluster.get_runtime_context().gcs_address
    driver = subprocess.Popen(
        [sys.executable, str(script), address], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        groups = json.loads(driver.stdout.readline())
        assert groups and all(alive(g) for g in groups.values())  # one per node: this one
        driver.kill()
        driver.wait(GONE_WITHIN_S)
        for group in groups.values():
            wait_gone(group)  # Ray ended the driver's actors; each took its server along
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.ray
def test_on_ray_a_server_that_never_answers_is_a_clear_error_and_leaves_nothing(ray_cluster):
    sleeper = [
        sys.executable,
        "-c",
        "import os,time; print('loading', os.getpid(), flush=True); time.sleep(600)",
    ]
    with pytest.raises(ServerError) as info:
        vane.ai.serve(sleeper, startup_timeout=2, runner="ray").start()
    message = str(info.value)
    node = ray_cluster.get_runtime_context().get_node_id()
    assert f"on node {node}" in message and "startup_timeout=2 s" in message
    wait_gone(int(re.search(r"loading (\d+)", message).group(1)))


def test_a_server_that_hangs_is_ended_restarted_and_its_requests_sent_again(tmp_path):
    rows = 40
    server = vane.ai.serve(
        command("--latency", "0", "--hang-after", "25"),
        health="/health",
        startup_timeout=60,
        unhealthy_timeout=1,
    )
    with server:
        # two requests in flight: what the hung server took down, the next one can answer
        out = questions(rows).prompt(
            "q", server=server, model="m", batch_size=10, max_concurrent_requests=2
        )
        result = out.write_parquet(tmp_path / "out")
        restarts = server.restarts
    got = vane.read_parquet(str(tmp_path / "out")).to_arrow().to_pylist()
    assert sorted((r["id"], r["response"]) for r in got) == [
        (i, test_server.answer_for(f"question {i}")) for i in range(rows)
    ]
    assert restarts == 1  # the hung one, ended; the next answered the rest
    ((_, usage),) = result.usage.items()
    assert usage["retries"] >= 1 and usage.get("failures", 0) == 0


def test_a_resumed_job_asks_a_restarted_server_only_what_it_never_answered(tmp_path):
    # Each run starts its own server, on a new port: the saved answers belong to the server by
    # its name, so the second run resumes instead of being refused as another pipeline.
    broken = [True]

    def after(batch):
        if broken[0] and 30 in batch["id"].to_pylist():
            raise RuntimeError("the job died here")
        return batch

    def job(server):
        answered = questions(48).prompt("q", server=server, model="m", batch_size=6)
        schema = {"id": "BIGINT", "q": "VARCHAR", "response": "VARCHAR"}
        return answered.map_batches(after, schema=schema, batch_size=6)

    out = tmp_path / "out"
    with vane.ai.serve(command("--latency", "0"), health="/health") as server:
        with pytest.raises(RuntimeError, match="died here"):
            job(server).write_parquet(out, resume=True)
        first = stats(server)["requests"]
    broken[0] = False
    with vane.ai.serve(command("--latency", "0"), health="/health") as server:
        result = job(server).write_parquet(out, resume=True)
        second = stats(server)["requests"]
    assert first >= 30 and second <= 48 - 30  # the 30 answered rows were not asked again
    assert result.rows == 48
    got = vane.read_parquet(str(out)).to_pylist()
    assert [r["response"] for r in got] == [
        test_server.answer_for(f"question {i}") for i in range(48)
    ]


@pytest.mark.ray
def test_on_ray_the_progress_line_shows_the_requests_each_node_server_holds(on_ray):
    """On Ray the counts come from the actors' workers through the action's tally: the line
    names the server by its node, and says what it holds in flight while it holds it."""
    display = ProgressDisplay(io.StringIO())
    counts: list[ServerRequests] = []
    stop_display = subscribe(display)
    stop_counts = subscribe(lambda e: counts.append(e) if isinstance(e, ServerRequests) else None)
    held = command("--hold", "--latency", "0", "--host", "{host}")
    try:
        with vane.ai.serve(held, health="/health", startup_timeout=120) as server:
            (node,) = server.urls
            url = server.base_url
            out = questions(6).prompt("q", server=server, model="m", batch_size=3)
            job = threading.Thread(target=out.to_arrow)
            job.start()
            try:
                # However Ray Data hands out the rows, what the server holds is what is shown
                def shown() -> bool:
                    holds = stats(server)["in_flight"]
                    line = f"{url} (node {node[:8]}): {holds} in flight"
                    return holds > 0 and line in display.text(width=400)

                wait_for("the held requests on the progress line", shown)
            finally:
                release(server)
                job.join()
    finally:
        stop_display()
        stop_counts()
    assert counts[-1].servers == (ServerCount(f"{url} (node {node[:8]})", 0, 6, 0),)
    assert display.text() == ""
