"""A pipeline on Ray that cannot fit the cluster fails before anything runs, saying what to
change (issue 25 item 1: two actors of 1 CPU on a 2-CPU machine left none for reading, and the
job sat at "starting" forever). The session's cluster has 4 CPUs and 4 GPUs.
"""

from __future__ import annotations

import pytest

import vane
from tests.conformance.test_backends import N, double
from vane.errors import ConfigurationError

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

SCHEMA = {"id": "BIGINT", "v": "BIGINT"}
EXPECTED = [{"id": i, "v": i * 2} for i in range(N)]


def test_actors_that_would_take_every_cpu_fail_before_anything_runs(on_ray):
    # Without the check this pipeline hangs: 4 actors hold the 4 CPUs, the read task waits
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)") as info:
        vane.range(N).map_batches(double, schema=SCHEMA, concurrency=4).to_pylist()
    assert "4 actors x 1 CPU for `double` (concurrency=4)" in str(info.value)
    assert "Use concurrency=3" in str(info.value)


def test_steps_that_each_fit_but_not_together_fail_when_the_second_is_built(on_ray):
    first = vane.range(N).map_batches(double, schema=SCHEMA, concurrency=2)
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)"):
        first.map_batches(lambda b: b, schema=SCHEMA, concurrency=2).to_pylist()


def test_column_udfs_are_checked_when_the_action_starts(on_ray):
    @vane.cls(max_concurrency=4)
    class Twice:
        def __call__(self, value: int) -> int:
            return value * 2

    rel = vane.range(N).with_column("v", Twice()(vane.col("id")))
    with pytest.raises(ConfigurationError, match=r"\(5 vs 4\)"):
        rel.to_pylist()


def test_an_autoscaling_pool_whose_maximum_exceeds_the_cluster_runs(on_ray):
    rows = (
        vane.range(N)
        .map_batches(double, schema=SCHEMA, batch_size=10, concurrency=(1, 16))
        .to_pylist()
    )
    assert rows == EXPECTED
