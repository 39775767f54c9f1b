"""The benchmark's report (``bench/report.py``) renders every workload ``bench/run.py`` runs: a
workload without its description or with a variant the report cannot read fails the report at
the end of an hour's run, after the runs themselves were saved."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def test_every_workload_the_bench_runs_is_described():
    names = set(re.findall(r'Workload\(\s*"(\w+)"', (BENCH / "run.py").read_text()))
    assert "images" in names and "overhead" in names  # (the pattern still finds them)
    assert names <= set(_report().ABOUT), names - set(_report().ABOUT)


def test_the_committed_results_render_with_every_target_read():
    report = _report()
    results = json.loads((BENCH / "results.json").read_text())
    text = report.render(results)
    for name in results["workloads"]:
        assert f"## {name}\n" in text
    assert "no explanation in report.py's WHY yet" not in text
