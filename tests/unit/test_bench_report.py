"""The benchmark's report (``bench/report.py``) renders every workload ``bench/run.py`` runs: a
workload without its description or with a variant the report cannot read fails the report at
the end of an hour's run, after the runs themselves were saved."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

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


def test_a_rerun_replaces_its_workloads_only_and_is_named_where_its_rows_are():
    report = _report()
    suite = json.loads((BENCH / "results.json").read_text())
    before = {n: [r for r in suite["runs"] if r["workload"] == n] for n in suite["workloads"]}
    rerun = json.loads(json.dumps(suite))  # the same machine and settings, a later commit
    rerun |= {"command": "bench/run.py --only store --replace", "started": "LATER"}
    rerun["machine"]["git_commit"] = "abc1234"
    rerun["versions"]["vane venv"]["packages"]["duckdb"] = "9.9.9"
    rerun["workloads"] = {"store": suite["workloads"]["store"]}
    rerun["runs"] = [dict(r, wall_s=99.0) for r in before["store"]]
    merged = report.replaced(json.loads(json.dumps(suite)), rerun)
    assert list(merged["workloads"]) == list(suite["workloads"])  # sections keep their order
    assert [r for r in merged["runs"] if r["workload"] == "store"] == rerun["runs"]
    for name in set(suite["workloads"]) - {"store"}:
        assert [r for r in merged["runs"] if r["workload"] == name] == before[name]
    text = report.render(merged)
    assert "Rerun since (`bench/run.py --only store --replace`): store, at commit `abc1234`" in text
    assert "packages other than the suite's: duckdb 9.9.9 (vane venv)." in text
    store = text[text.index("## store\n") : text.index("## store_first\n")]
    assert "Rerun at commit `abc1234`, started LATER" in store
    assert "abc1234" not in text[text.index("## store_first\n") :]
    # a second rerun of the same workload takes the first's place in the list
    again = json.loads(json.dumps(rerun)) | {"started": "LATEST"}
    twice = report.replaced(merged, again)
    assert twice["reruns"][-1]["started"] == "LATEST"
    assert [r for r in twice["reruns"] if "store" in r["workloads"]] == [twice["reruns"][-1]]
    assert "LATER" not in [r["started"] for r in twice["reruns"]]
    other = json.loads(json.dumps(suite)) | {"settings": {**suite["settings"], "in_flight": 1}}
    other["workloads"] = {"store": suite["workloads"]["store"]}
    with pytest.raises(SystemExit, match="other settings"):
        report.replaced(json.loads(json.dumps(suite)), other)
    elsewhere = json.loads(json.dumps(rerun))
    elsewhere["machine"]["cpu_model"] = "another CPU"
    with pytest.raises(SystemExit, match=r"another machine \(cpu_model\)"):
        report.replaced(json.loads(json.dumps(suite)), elsewhere)


def _run_module():
    """bench/run.py, which imports ``data`` and ``report`` from beside it."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("machine", ["the suite's", "another"])
def test_a_rerun_that_stops_or_is_refused_leaves_the_suites_results_as_they_were(
    tmp_path, monkeypatch, machine
):
    run = _run_module()
    suite_text = (BENCH / "results.json").read_text()
    (tmp_path / "results.json").write_text(suite_text)
    found = json.loads(suite_text)["machine"]  # (this machine stands for the suite's)
    if machine == "another":
        found = found | {"cpu_count": 64}
    monkeypatch.setattr(run, "machine", lambda: found)
    monkeypatch.setattr(run, "compile_sources", lambda: None)
    monkeypatch.setattr(run.data, "ensure", lambda kind, rows: tmp_path / "in.parquet")
    started = []
    kept = [r for r in json.loads(suite_text)["runs"] if r["workload"] == "first_result"]

    def stopped(*args: object, **kwargs: object) -> dict[str, object]:
        started.append(args)
        if len(started) > 1:
            raise KeyboardInterrupt  # Ctrl-C during the rerun's second run
        return kept[0] | {"wall_s": 99.0}  # the first one measured

    monkeypatch.setattr(run, "run_case", stopped)
    argv = ["run.py", "--only", "first_result", "--replace", "--output", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(KeyboardInterrupt if machine == "the suite's" else SystemExit):
        run.main()
    assert (tmp_path / "results.json").read_text() == suite_text
    assert bool(started) == (machine == "the suite's")  # another machine: refused up front


def test_the_cost_of_resume_is_the_median_of_each_repetition_s_ratio():
    """Two variants run in the same rounds: a machine that turns slower (here by a fifth,
    between the two runs of round 2) moves both, and the median of each round's ratio sees
    through it (resume costs 2%) where the ratio of the medians does not (22%)."""
    report = _report()
    plain = [1.0, 1.0, 1.0, 1.2, 1.2]
    resume = [1.02, 1.02, 1.224, 1.224, 1.224]

    def runs(times):
        return [{"repetition": i, "seconds": t, "rows_per_s": 1.0} for i, t in enumerate(times)]

    target = next(t for t in report.RESUME if t.workload == "overhead" and t.paired)
    base, variant = report.Variant("a@1", runs(plain)), report.Variant("b@1", runs(resume))
    value, notes = report.figure(target, [variant], base)
    assert value == pytest.approx(1.02)
    assert "median of 5 repetitions' ratios" in notes and "whose ratio is 1.22x" in notes
    unpaired = report.figure(report.replace(target, paired=False), [variant], base)[0]
    assert unpaired == pytest.approx(1.224)
    # a run that does not say its repetition pairs with none (not with another such run)
    lost = report.Variant("b@1", [*runs(resume), {"seconds": 9.0, "rows_per_s": 1.0}])
    unsaid = report.Variant("a@1", [*runs(plain), {"seconds": 1.0, "rows_per_s": 1.0}])
    assert report.pair_ratios(lost, unsaid) == report.pair_ratios(variant, base)
