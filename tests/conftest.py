from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Nothing may come from a model hub: models come from installed packages (see tests/models.py),
# laid out as an offline hub cache before any test imports huggingface_hub. Worker processes
# inherit these variables. The cache is the session's own (sessions may run side by side) and
# is removed when the session ends, passed or failed.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
_HF_HOME = Path(tempfile.mkdtemp(prefix="vane-tests-hf-"))
os.environ["HF_HOME"] = str(_HF_HOME)

# Every Ray cluster a test starts, here or in a process it runs (docs examples, the CLI, drivers),
# is a new one of its own. Left to itself, ``ray.init()`` connects to the cluster named in
# /tmp/ray/ray_current_cluster: one that a test's ``ray.cluster_utils.Cluster`` has up at that
# moment, or a dead one a killed run left named there (a CI run failed all 80 tests on the
# session's cluster so). An explicit ``address=`` still connects where it says.
os.environ["RAY_ADDRESS"] = "local"


# Property tests draw the same examples on every run (a failure in CI is a failure anywhere) and
# never judge a test by how long an example took: a busy 2-core machine is slow, not wrong.
# HYPOTHESIS_PROFILE=explore draws fresh examples, many more of them, to look for new failures.
settings.register_profile(
    "vane", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "explore", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "vane"))


def pytest_configure(config: pytest.Config) -> None:
    from tests.models import install_minilm_in_hub_cache

    install_minilm_in_hub_cache(_HF_HOME)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HF_HOME, ignore_errors=True)  # links to the packaged model, not copies


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``make test`` (pytest-xdist: ``-n 2 --dist loadgroup``) a worker takes a whole
    group of tests at once. Every test that runs on Ray is one group, so that one cluster (the
    session's) serves them all, and it goes first: it is the longest stretch, which the other
    worker fills. Each other module is a group, so that its module- and session-scoped servers,
    models and example runs (tests/test_docs.py starts all the docs' examples at once) start
    once. Runs before xdist's own hook, which reads the ``xdist_group`` marks."""

    def group(item: pytest.Item) -> str:
        if item.get_closest_marker("ray") or "ray_cluster" in getattr(item, "fixturenames", ()):
            return "ray"
        return item.nodeid.split("::", 1)[0]

    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))
    items.sort(key=lambda item: group(item) != "ray")  # stable: each module keeps its order


@pytest.fixture(autouse=True)
def _ray_only_where_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that starts Ray in this process must be marked ``ray`` (or use ``ray_cluster``):
    under ``make test`` those all run on one worker, and one unmarked would start a second
    cluster on the other worker, beside the first, on a 2-core machine."""
    ray = sys.modules.get("ray")
    before = ray is not None and ray.is_initialized()
    yield
    ray = sys.modules.get("ray")
    if before or ray is None or not ray.is_initialized():
        return
    item = request.node
    if not (item.get_closest_marker("ray") or "ray_cluster" in item.fixturenames):
        pytest.fail(f"{item.nodeid} started Ray in the test process: mark it @pytest.mark.ray")


@pytest.fixture(autouse=True)
def _quiet_progress():
    import vane

    vane.configure(progress=False)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the session, sized by logical resources (4 CPUs and 4 GPUs on
    a 2-core machine without a GPU), its workers able to import the tests' modules.

    Its workers' output stays in their log files (``log_to_driver=False``, as Ray's own tests
    run): no test reads it from this process, and the thread that would forward it can hang
    ``ray.shutdown()`` at the session's end in its GCS poll (ray #44836, #45044), which
    stopped a whole suite at 98%."""
    ray = pytest.importorskip("ray")
    root = str(Path(__file__).resolve().parents[1])
    ray.init(
        address="local",
        num_cpus=4,
        num_gpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": root, "HF_HUB_OFFLINE": "1"}},
    )
    yield ray
    _shut_down(ray)


def _shut_down(ray) -> None:
    """``ray.shutdown()``, which can block for good in its GCS subscribers' ``close()`` (a gRPC
    call without a deadline; ray #44836, #45044): it held a suite at 98% twice, the log
    subscriber's once, the error subscriber's once. Killing the session's GCS ends that call,
    and the shutdown goes on; so a watchdog does, if the shutdown has not ended in 30 s.

    A shutdown that does not hang takes a few seconds. One that hangs does so in the error
    subscriber's ``close()``, the first thing it does. It did at the end of every full run of
    the suite (5 of 5), and of 4 of 4 runs of a Ray test file followed by five or more unit
    test files in one process (none of those files alone, after the Ray file, brought it
    about): each run paid the watchdog's whole wait, two minutes when it was 120 s."""
    ended = threading.Event()

    def watch() -> None:
        if ended.wait(30):
            return
        for pid in _children("gcs_server"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    threading.Thread(target=watch, name="ray-shutdown-watchdog", daemon=True).start()
    try:
        ray.shutdown()
    finally:
        ended.set()


def _children(name: str) -> list[int]:
    """This process's children whose command is ``name`` (from /proc: no psutil in the test
    environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        command = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == os.getpid() and command == name:
            found.append(int(entry))
    return found


@pytest.fixture
def on_ray(ray_cluster):
    """Run the test's actions on the Ray runner, then switch back to the local one, ending the
    hosts its actions kept (``vane/execution/ray/parked.py``): what they hold is not the next
    test's."""
    import vane
    from vane.execution.ray.parked import PARKED

    vane.configure(runner="ray")
    yield ray_cluster
    vane.configure(runner="local")
    PARKED.clear()
