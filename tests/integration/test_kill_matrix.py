"""The kill matrix of resumable writes (issue 30): a real job process, ``kill -9``ed again and
again at random instants, then run to its end, pays for each row once plus, at each kill, at
most the rows it had in flight; its output holds every row once, in order.

Each case is a job (an embedding over sentences, or a prompt per row against vane's
OpenAI-compatible test server on 127.0.0.1) written to a sink (a Parquet folder, or a Lance
table) with ``resume=True``. A kill's instant is drawn at random: once the job has paid for a
number of rows drawn from what is left, after a random delay more (its last kill waits for
every row to be paid for, then a delay long enough to land in the write, the commit or the
removal of the saved work). What each run paid for is counted where it cannot be lost: the
embedding model syncs a line per call to a log before it computes, and the test server counts
the requests it was sent.

What a run that was killed may pay for and not keep is the rows in flight at the kill: the
stage sends a batch on only while fewer than ``actors x batches per actor`` are out (a plain
function's actor holds two: one running, one queued; an AI function's, which is async, its
``max_concurrency_per_actor``), so the bound, in rows, is that times the batch size, derived
from the job's own plan (``_in_flight_rows``), not written down here.

The normal suite runs a few kills per case on a few thousand rows. ``make test-stress`` sets
``VANE_KILL_MATRIX=full``: 30+ kills per sink over a 20,000-row embedding job and a 20,000-row
prompt job, and a few kills of the real all-MiniLM-L6-v2 (the packaged model, through
sentence-transformers; too slow on 2 cores for 30 kills of 20,000 rows, hence the
deterministic numpy embedding, which costs 50 ms a batch as a model would, for the rest).
The draws are seeded: the failure message names the seed and each kill, and
``VANE_KILL_SEED=n`` draws with another seed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import vane
from tests.integration import kill_jobs
from vane.execution.actors.body import batches_in_flight
from vane.io.resume import ResumeStore, store_path
from vane.plan.nodes import UdfStep
from vane.plan.optimizer import optimize
from vane.plan.traverse import walk
from vane.testing.server import Behaviour, OpenAIServer, answer_for

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("VANE_KILL_MATRIX") == "full"


@dataclass(frozen=True)
class Size:
    rows: int
    batch: int
    kills: int


# Rows divisible by the batch: every batch, and so every saved answer, holds `batch` rows.
EMBED = Size(20_000, 80, 32) if FULL else Size(4_000, 80, 3)
# An AI function's actor holds 16 batches at once (its max_concurrency_per_actor): small
# batches keep the rows in flight at a kill (16 x 10) a small part of the job.
PROMPT = Size(20_000, 10, 32) if FULL else Size(1_000, 10, 3)
MINILM = Size(1_000, 50, 4)
CONCURRENCY = 2  # embedding actors: four batches in flight at a kill


def _seed(case: str) -> int:
    chosen = os.environ.get("VANE_KILL_SEED")
    return int(chosen) if chosen else sum(map(ord, case))  # fixed per case unless asked


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    running = OpenAIServer(Behaviour(latency=0.005)).start()
    yield running
    running.stop()


@dataclass
class Matrix:
    """One case's kills and its run to the end: what each run paid for, and what it kept."""

    case: str
    size: Size
    out: Path
    command: list[str]
    paid: Callable[[], int]  # rows paid for so far, in all runs
    sink: str
    seed: int
    in_flight: int  # rows a kill may find paid for and not kept
    history: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    parts_kept: int = 0  # the most output parts a killed run left kept (io/parts.py)

    def say(self) -> str:
        return (
            f"{self.case}: seed {self.seed} (VANE_KILL_SEED={self.seed} draws the same kills), "
            f"at most {self.in_flight} rows in flight, runs so far: "
            + ("; ".join(self.history) or "none")
        )

    def saved_rows(self) -> int:
        return sum(1 for _ in ResumeStore(str(self.out), "test").kept()) * self.size.batch

    def committed(self) -> bool:
        if self.sink == "lance":
            return any((self.out / "_versions").glob("*.manifest"))
        return self.out.exists()

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its process group: whatever it starts dies with it
        )

    def run(self) -> int:
        """Kill the job ``size.kills`` times (fewer if a run ends first), then run it to its
        end; returns the kills made."""
        draw = random.Random(self.seed)
        kills = 0
        for k in range(self.size.kills):
            left = self.size.rows - self.saved_rows()
            last = k == self.size.kills - 1
            # Spread over what is left (half of it, on average, before the last kill: a run
            # keeps going for a moment after its target, and pays for what was in flight); the
            # last kill waits for every row, then lands in the write, the commit or the cleanup.
            share = left if last else draw.randint(1, max(1, left // (self.size.kills - k)))
            delay = draw.uniform(0.02, 0.6) if last else draw.uniform(0, 2 * kill_jobs.COST_S)
            killed = self._kill_once(self.paid() + share, delay)
            kills += killed
            if self.committed():
                break
        if not self.committed():
            self._to_the_end()
        # Every kill but the last (which may find the job ended) found it running.
        assert kills >= self.size.kills - 1, f"only {kills} kills\n{self.say()}"
        return kills

    def _kill_once(self, paid: int, delay: float) -> bool:
        saved, before = self.saved_rows(), self.paid()
        job = self.start()
        while self.paid() < paid and job.poll() is None:
            time.sleep(0.005)
        time.sleep(delay)
        killed = job.poll() is None
        if killed:
            os.killpg(job.pid, signal.SIGKILL)
        _, stderr = job.communicate()
        journal = store_path(str(self.out)) / "parts.journal"
        if journal.exists():
            self.parts_kept = max(self.parts_kept, len(journal.read_bytes().splitlines()) - 1)
        ran = self.paid() - before
        if not killed:
            assert job.returncode == 0, f"the job failed: {stderr}\n{self.say()}"
        kept = (self.size.rows if self.committed() else self.saved_rows()) - saved
        self.history.append(
            f"{'killed' if killed else 'ended'} after paying {ran} rows (target {paid - before}"
            f" + {delay:.3f} s), kept {kept} more, committed: {self.committed()}"
        )
        # What the run paid for and did not keep was in flight at the kill.
        assert ran - kept <= self.in_flight, (
            f"a kill lost {ran - kept} paid rows, more than the {self.in_flight} in flight\n"
            + self.say()
        )
        return killed

    def _to_the_end(self) -> None:
        saved, before = self.saved_rows(), self.paid()
        job = self.start()
        stdout, stderr = job.communicate(timeout=600)
        self.history.append(f"ran to the end after {saved} rows kept")
        assert job.returncode == 0, f"{stderr}\n{self.say()}"
        # Not killed: it paid for exactly the rows no run had kept, and said so.
        assert self.paid() - before == self.size.rows - saved, self.say()
        assert f"resumed {saved}" in stdout, f"{stdout}\n{self.say()}"
        assert not store_path(str(self.out)).exists(), "the saved work outlived the commit"


def _in_flight_rows(rel: vane.Relation) -> int:
    """The rows a kill may find sent and not kept: every UDF step's actors, times the batches
    each holds (``batches_in_flight``), times the batch."""
    steps = [n for n in walk(optimize(rel._plan)) if isinstance(n, UdfStep)]
    return sum(s.udf.max_actors * batches_in_flight(s.udf) * s.udf.rows_per_batch for s in steps)


def _output(sink: str, out: Path) -> vane.Relation:
    return vane.read_lance(str(out)) if sink == "lance" else vane.read_parquet(str(out))


def _embed_case(tmp_path: Path, sink: str, model: str, size: Size) -> None:
    # "parquet-parts": a folder whose parts close every few batches, kept for the rerun
    env = {"KILL_JOB_PART_BYTES": str(3 * size.batch * 140)} if sink == "parquet-parts" else {}
    sink = sink.removesuffix("-parts")
    if sink == "lance":
        pytest.importorskip("lance")
    out = tmp_path / ("out.lance" if sink == "lance" else "out")
    log = tmp_path / "calls.log"
    job = [str(a) for a in ("embed", out, sink, log, model, size.rows, size.batch, CONCURRENCY)]

    def paid() -> int:  # each line is a call on a whole batch
        return len(log.read_text().splitlines()) * size.batch if log.exists() else 0

    case = f"embed[{model}, {sink}{' in parts' if env else ''}, {size.rows} rows]"
    rel = kill_jobs.embed_job(str(log), model, size.rows, size.batch, CONCURRENCY)
    matrix = Matrix(
        case,
        size,
        out,
        [sys.executable, "-m", "tests.integration.kill_jobs", *job],
        paid,
        sink,
        _seed(case),
        _in_flight_rows(rel),
        env=env,
    )
    kills = matrix.run()
    print(matrix.say())  # with -s: where each kill landed
    assert matrix.parts_kept > 0 or not env, "no kill found a part kept: parts went untested"
    # The bound, over every run: rows, plus what was in flight at each kill.
    assert paid() <= size.rows + kills * matrix.in_flight, matrix.say()
    calls = Counter(int(line) for line in log.read_text().splitlines())
    assert sorted(calls) == list(range(0, size.rows, size.batch)), matrix.say()
    table = _output(sink, out).to_arrow()
    ids = table["id"].to_numpy()
    assert ids.tolist() == list(range(size.rows)), f"not once each, in order\n{matrix.say()}"
    vectors = np.stack(table["embedding"].to_numpy(zero_copy_only=False))
    if model == "numpy":
        assert np.array_equal(vectors, kill_jobs.numpy_vectors(ids)), matrix.say()
    else:  # all-MiniLM-L6-v2's vectors are normalized
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3), matrix.say()


@pytest.mark.timeout(1800 if FULL else 300)
@pytest.mark.parametrize("sink", ["parquet", "parquet-parts", "lance"])
def test_an_embedding_job_killed_at_random_pays_once_per_row_plus_what_was_in_flight(
    tmp_path, sink
):
    _embed_case(tmp_path, sink, "numpy", EMBED)


@pytest.mark.skipif(not FULL, reason="the real model's kills run under make test-stress")
@pytest.mark.timeout(1800)
def test_the_real_minilm_killed_at_random_pays_once_per_row_plus_what_was_in_flight(tmp_path):
    pytest.importorskip("sentence_transformers")
    _embed_case(tmp_path, "parquet", "minilm", MINILM)


@pytest.mark.timeout(1800 if FULL else 300)
@pytest.mark.parametrize("sink", ["parquet", "lance"] if FULL else ["parquet"])
def test_a_prompt_job_killed_at_random_sends_each_row_once_plus_what_was_in_flight(
    tmp_path, server, sink
):
    if sink == "lance":
        pytest.importorskip("lance")
    server.reset(Behaviour(latency=0.005))
    size = PROMPT
    out = tmp_path / ("out.lance" if sink == "lance" else "out")
    case = f"prompt[{sink}, {size.rows} rows]"
    rel = kill_jobs.prompt_job(server.base_url, size.rows, size.batch)
    command = [sys.executable, "-m", "tests.integration.kill_jobs", "prompt", str(out), sink]
    matrix = Matrix(
        case,
        size,
        out,
        [*command, server.base_url, str(size.rows), str(size.batch)],
        lambda: server.requests,  # one request a row, counted by the server
        sink,
        _seed(case),
        _in_flight_rows(rel),
    )
    kills = matrix.run()
    print(matrix.say())
    assert server.requests <= size.rows + kills * matrix.in_flight, matrix.say()
    texts = kill_jobs.sentences(size.rows).to_arrow()["text"].to_pylist()
    assert set(server.by_prompt) == set(texts), matrix.say()
    table = _output(sink, out).to_arrow()
    assert table["id"].to_pylist() == list(range(size.rows)), matrix.say()
    assert table["response"].to_pylist() == [answer_for(t) for t in texts], matrix.say()
