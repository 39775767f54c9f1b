"""Requests in flight per server, as an actor's clients count them (``vane.observe.requests``):
a burst of changes is one report, with the counts as they stand, and the actor's end reports
what a timer still held."""

from __future__ import annotations

import asyncio

from vane.observe.events import ServerCount
from vane.observe.requests import ServerLoad, counting, counts_for


def test_a_burst_of_changes_is_one_report_of_the_counts_as_they_stand():
    reports: list[tuple[ServerCount, ...]] = []

    async def burst() -> None:
        reported = asyncio.Event()
        load = ServerLoad(lambda servers: (reports.append(servers), reported.set()))
        with counting(load):
            a, b = counts_for("http://a/v1"), counts_for("http://b/v1")
            again = counts_for("http://a/v1")  # a second client of the same server
        assert a is not None and b is not None and again is not None
        for counts in [a] * 50 + [b] * 3 + [again] * 2:  # no await between: one loop turn
            counts.in_flight += 1
            counts.sent += 1
            counts.moved()
        again.in_flight -= 1
        again.retried += 1
        again.moved()
        await reported.wait()

    asyncio.run(burst())
    assert reports == [(ServerCount("http://a/v1", 51, 52, 1), ServerCount("http://b/v1", 3, 3))]


def test_the_end_of_an_actor_reports_what_its_timer_still_held():
    reports: list[tuple[ServerCount, ...]] = []
    load = ServerLoad(reports.append)

    async def one() -> None:
        with counting(load):
            counts = counts_for("http://a/v1")
        assert counts is not None
        counts.sent += 1
        counts.moved()

    asyncio.run(one())  # the loop ends before the timer fires
    assert reports == []
    load.flush()
    assert reports == [(ServerCount("http://a/v1", 0, 1),)]
    load.flush()  # nothing more is due
    assert len(reports) == 1


def test_a_client_made_outside_an_actor_counts_nothing():
    assert counts_for("http://a/v1") is None


def test_a_report_that_fails_fails_no_request(caplog):
    def broken(servers: tuple[ServerCount, ...]) -> None:
        raise RuntimeError("the tally is gone")

    load = ServerLoad(broken)
    with counting(load):
        counts = counts_for("http://a/v1")
    assert counts is not None
    counts.sent += 1
    counts.moved()  # off an event loop: reported at once, and its failure stays its own
    counts.moved()
    assert "reporting requests in flight" in caplog.text
