"""What the progress line says for given events at given times (the display's clock is the
test's): rows in of the total, rows out, rows/s, the time left, actors busy; a percentage only
with a total, and no time left without one."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vane.observe.events import (
    BatchDone,
    ServerCount,
    ServerRequests,
    StageFinished,
    StageStarted,
    merge_servers,
)
from vane.observe.progress import ProgressDisplay, StageLine, duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_with_a_total_says_how_far_and_how_long_is_left():
    line = StageLine(StageStarted("embed", 1, 2, 10_000), now=0.0)
    assert line.text(5.0) == "0 of 10,000 rows in, 0 out, starting"
    # the first batch comes after a 30 s model load: the rate is measured from it on
    line.batch(BatchDone("embed", 1, 1000, 1000, 2, 2), now=30.0)
    assert line.text(30.0) == (
        "1,000 of 10,000 rows in, 1,000 out, 33 rows/s, ETA 4m 30s, 2/2 actors busy"
    )
    line.batch(BatchDone("embed", 1, 1000, 990, 1, 2, {"requests": 4}), now=31.0)
    assert line.rate() == 1000.0
    assert line.text(31.0) == (
        "2,000 of 10,000 rows in, 1,990 out, 1,000 rows/s, 4 requests, ETA 8s, 1/2 actors busy"
    )
    # between batches the time left counts down, and stops at nothing
    assert line.seconds_left(35.0) == 4.0
    assert "ETA 0s" in line.text(60.0)
    line.finish(StageFinished("embed", 1, 10_000, 9_990, 10, 0, 40.0, {"requests": 20}))
    assert line.text(70.0) == (
        "10,000 rows in, 9,990 out, 250 rows/s, 20 requests, done in 40.0 s, 10 skipped"
    )


def test_a_line_without_a_total_has_no_time_left():
    line = StageLine(StageStarted("double", 1, 1), now=0.0)
    assert line.text(1.0) == "0 rows in, 0 out, starting"
    line.batch(BatchDone("double", 1, 1, 1, 1, 1), now=4.0)
    assert line.text(4.0) == "1 row in, 1 out, 0.2 rows/s, 1/1 actors busy"
    line.batch(BatchDone("double", 1, 3, 3, 1, 1), now=5.0)
    assert line.text(9.0) == "4 rows in, 4 out, 3.0 rows/s, 1/1 actors busy"
    line.finish(StageFinished("double", 1, 4, 4, 0, 3, 8.0))
    assert line.text(9.0) == "4 rows in, 4 out, 0.5 rows/s, done in 8.0 s, 3 failed as nulls"


def test_a_resumed_stage_says_what_the_saved_run_answered_and_times_only_the_rest():
    line = StageLine(StageStarted("embed", 1, 0, 10_000), now=0.0)
    # 6,000 rows come from the saved work at once, then the model starts on the rest
    line.batch(BatchDone("embed", 1, 6000, 6000, 0, 0, rows_resumed=6000), now=0.5)
    assert line.text(0.5).startswith("6,000 of 10,000 rows in, 6,000 out, 6,000 answered by")
    line.batch(BatchDone("embed", 1, 1000, 1000, 1, 1), now=20.5)
    line.batch(BatchDone("embed", 1, 1000, 1000, 1, 1), now=30.5)
    assert line.rate() == 100.0  # the model's own pace, not the saved rows' instant
    assert line.seconds_left(30.5) == 20.0


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.2, "0s"), (42.4, "42s"), (59.6, "1m 00s"), (185, "3m 05s"), (7380, "2h 03m")],
)
def test_a_time_left_is_said_as_precisely_as_is_worth_reading(seconds, said):
    assert duration(seconds) == said


def test_the_display_draws_a_percentage_only_for_a_stage_with_a_total():
    clock = Clock()
    display = ProgressDisplay(io.StringIO(), clock=clock)
    display(StageStarted("embed", 1, 2, 400))
    display(StageStarted("tag", 2, 1))
    clock.now = 2.0
    display(BatchDone("embed", 1, 100, 100, 2, 2))
    display(BatchDone("tag", 2, 100, 100, 1, 1))
    clock.now = 3.0
    display(BatchDone("embed", 1, 100, 100, 2, 2))
    embed, tag = display.text(width=200).splitlines()
    assert embed.startswith("embed:") and " 50% 200 of 400 rows in, 200 out" in embed
    assert "100 rows/s, ETA 2s, 2/2 actors busy" in embed
    assert tag.startswith("tag:") and "%" not in tag and "ETA" not in tag
    assert "100 rows in, 100 out, 50 rows/s, 1/1 actors busy" in tag
    assert display.line(1) == embed.split("50% ")[1].rstrip()


def test_a_line_says_what_each_server_has_in_flight_while_its_stage_runs():
    line = StageLine(StageStarted("prompt", 1, 2), now=0.0)
    held = ServerRequests(
        "prompt",
        1,
        (
            ServerCount("http://10.0.0.1:8000/v1 (node 1a2b3c4d)", 3, 5, 2),
            ServerCount("http://10.0.0.2:8000/v1 (node 5e6f7a8b)", 0, 4),
        ),
    )
    line.servers = held.servers
    # requests sent before any batch is answered: the actors are up, not starting
    assert line.text(1.0) == (
        "0 rows in, 0 out; http://10.0.0.1:8000/v1 (node 1a2b3c4d): 3 in flight, 5 sent, "
        "2 retried; http://10.0.0.2:8000/v1 (node 5e6f7a8b): 0 in flight, 4 sent"
    )
    line.finish(StageFinished("prompt", 1, 4, 4, 0, 0, 2.0, {"requests": 9}))
    assert "in flight" not in line.text(3.0)  # a finished line says what was done


def test_the_display_draws_the_latest_counts_of_a_running_stage_only():
    display = ProgressDisplay(io.StringIO(), clock=Clock())
    display(ServerRequests("prompt", 1, (ServerCount("http://a/v1", 1, 1),)))  # not started
    display(StageStarted("prompt", 1, 1))
    display(ServerRequests("prompt", 1, (ServerCount("http://a/v1", 2, 2),)))
    display(ServerRequests("prompt", 1, (ServerCount("http://a/v1", 1, 3, 1),)))
    assert display.line(1).endswith("; http://a/v1: 1 in flight, 3 sent, 1 retried")
    display(StageFinished("prompt", 1, 3, 3, 0, 0, 1.0))
    assert display.text() == ""


counts = st.builds(
    ServerCount,
    st.sampled_from(["http://a/v1", "http://b/v1", "http://c/v1"]),
    st.integers(0, 1000),
    st.integers(0, 1000),
    st.integers(0, 1000),
)


@given(st.lists(st.lists(counts, max_size=4), max_size=5))
def test_merged_counts_sum_each_server_once_in_name_order(actors):
    merged = merge_servers(actors)
    assert [c.server for c in merged] == sorted({c.server for a in actors for c in a})
    for total in merged:
        mine = [c for a in actors for c in a if c.server == total.server]
        assert total.in_flight == sum(c.in_flight for c in mine)
        assert total.sent == sum(c.sent for c in mine)
        assert total.retried == sum(c.retried for c in mine)
