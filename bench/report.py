"""RESULTS.md from results.json: every number in it is computed here from the recorded runs.

    python bench/report.py            # rewrite bench/RESULTS.md from bench/results.json
    python bench/report.py DIR        # DIR/RESULTS.md from DIR/results.json (run.py --output)

Per workload, a variant's figure is the median of its runs; min-max shows the spread. Ratios
compare medians: ``x NAME`` is this variant's throughput divided by NAME's (1.00: as fast,
0.50: half as fast, 2.00: twice as fast). A variant with failed runs says so in its row, with
the first error and the log to read; it is never left out.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

ABOUT = {
    "overhead": (
        "Engine overhead: Parquet in, a batch UDF computing `id * 2` and `length(text)`, Parquet "
        "out, 4,096 rows a batch. DuckDB doing the same in SQL is the floor; the hand-written "
        "pyarrow loop is what the UDF costs without an engine."
    ),
    "memory": (
        "Memory against input size: the overhead pipeline at two sizes, 10x apart. Flat memory "
        "means the peak at the large size is close to the peak at the small one."
    ),
    "first_result": (
        "Start to first result: seconds from the interpreter's start (process creation) to the "
        "first row of a 10-row Parquet file passed through a trivial UDF, imports and engine "
        "start included. `process wall` is the whole process as the driver saw it, exit included."
    ),
    "prompt": (
        "Prompting a server: one chat completion per row against an OpenAI-compatible server on "
        "127.0.0.1 that answers each request after {latency} s, {in_flight} requests in flight "
        "for every engine (`server max in flight` is what the server saw). The aiohttp loop is "
        "the practical limit of a Python client on this machine."
    ),
    "embed": (
        "Embedding: all-MiniLM-L6-v2 (sentence-transformers, CPU, 2 torch threads in every "
        "variant) over sentences of 8-30 words, batches of 64, Parquet in, (id, FLOAT[384]) "
        "Parquet out. Model loading is inside the timed part for every variant. The hand loop is "
        'the physical limit of the machine. `vane-ray` is vane with `configure(runner="ray")` '
        "on a local Ray cluster started as Ray Data's is (`ray.init(num_cpus=2)`, timed apart "
        "as *engine start*)."
    ),
}
BASELINES = {"overhead": "hand-loop", "embed": "hand-loop", "prompt": "aiohttp-loop"}


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def one_line(record: dict[str, Any]) -> str:
    """A run as one line for the terminal while the suite goes."""
    head = f"{record['workload']:<13}{record['case']:<34}#{record['repetition'] + 1}"
    if "error" in record:
        return f"{head}  ERROR {record['error'][:150]}"
    return (
        f"{head}  {record['seconds']:8.2f} s  {record.get('rows_per_s', 0):12,.0f} rows/s  "
        f"peak {mib(record['peak_rss_bytes'])}"
    )


class Variant:
    """The runs of one variant (one case) of a workload."""

    def __init__(self, label: str, runs: list[dict[str, Any]]) -> None:
        self.label = label
        self.name = label.rsplit("@", 1)[0]
        self.runs = runs
        self.ok = [r for r in runs if "error" not in r]
        self.failed = [r for r in runs if "error" in r]

    def values(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.ok if key in r]

    @property
    def seconds(self) -> float:
        return median(self.values("seconds"))

    @property
    def rate(self) -> float:
        return median(self.values("rows_per_s"))

    def note(self) -> str:
        if not self.failed:
            return ""
        first = self.failed[0]
        where = f" (log: `{first['log']}`)" if "log" in first else ""
        error = str(first["error"]).replace("|", "/").replace("\n", " ")[:200]
        return f"{len(self.failed)} of {len(self.runs)} runs failed: {error}{where}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def failed_row(variant: Variant, width: int) -> list[str]:
    return [f"**{variant.name}**", "error", *[""] * (width - 3), variant.note()]


def throughput_section(name: str, variants: list[Variant]) -> list[str]:
    ok = [v for v in variants if v.ok]
    baseline = BASELINES.get(name)
    order = sorted(ok, key=lambda v: v.name != baseline)  # the baseline's column first
    extra: list[tuple[str, Callable[[Variant], str]]] = []
    if any(v.values("server_max_in_flight") for v in variants):
        extra.append(
            ("server max in flight", lambda v: f"{max(v.values('server_max_in_flight')):.0f}")
        )
    if any(v.values("startup_s") for v in variants):
        extra.append(
            (
                "engine start s (not in median)",
                lambda v: f"{median(v.values('startup_s')):.2f}" if v.values("startup_s") else "",
            )
        )
    header = [
        "variant",
        "runs",
        "median s",
        "min-max s",
        "rows/s",
        "peak tree RSS",
        "process wall s",
        *[title for title, _ in extra],
        *[f"x {v.name}" for v in order],
        "notes",
    ]
    rows = []
    for v in variants:
        if not v.ok:
            rows.append(failed_row(v, len(header)))
            continue
        rows.append(
            [
                f"**{v.name}**" if v.name == baseline else v.name,
                str(len(v.ok)),
                f"{v.seconds:.2f}",
                spread(v.values("seconds")),
                f"{v.rate:,.0f}",
                mib(median(v.values("peak_rss_bytes"))),
                f"{median(v.values('wall_s')):.2f}",
                *[cell(v) for _, cell in extra],
                *[f"{v.rate / other.rate:.2f}" for other in order],
                v.note(),
            ]
        )
    return table(header, rows)


def memory_section(variants: list[Variant]) -> list[str]:
    sizes = sorted({int(v.label.rsplit("@", 1)[1]) for v in variants})
    small, large = sizes[0], sizes[-1]
    names = list(dict.fromkeys(v.name for v in variants))
    by = {(v.name, int(v.label.rsplit("@", 1)[1])): v for v in variants}
    header = [
        "variant",
        f"peak tree RSS @ {small:,} rows",
        f"peak tree RSS @ {large:,} rows",
        f"{large // small}x rows: peak ratio",
        f"median s @ {small:,}",
        f"median s @ {large:,}",
        "notes",
    ]
    rows = []
    for name in names:
        lo, hi = by[(name, small)], by[(name, large)]
        notes = "; ".join(n for n in (lo.note(), hi.note()) if n)
        if not (lo.ok and hi.ok):
            rows.append([name, "error", "", "", "", "", notes])
            continue
        lo_peak, hi_peak = median(lo.values("peak_rss_bytes")), median(hi.values("peak_rss_bytes"))
        rows.append(
            [
                name,
                mib(lo_peak),
                mib(hi_peak),
                f"{hi_peak / lo_peak:.2f}",
                f"{lo.seconds:.2f}",
                f"{hi.seconds:.2f}",
                notes,
            ]
        )
    return table(header, rows)


def first_section(variants: list[Variant]) -> list[str]:
    header = [
        "engine",
        "runs",
        "median s to first row",
        "min-max s",
        "process wall s",
        "peak tree RSS",
        "notes",
    ]
    rows = []
    for v in variants:
        if not v.ok:
            rows.append(failed_row(v, len(header)))
            continue
        rows.append(
            [
                v.name,
                str(len(v.ok)),
                f"{v.seconds:.2f}",
                spread(v.values("seconds")),
                f"{median(v.values('wall_s')):.2f}",
                mib(median(v.values("peak_rss_bytes"))),
                v.note(),
            ]
        )
    return table(header, rows)


def render(results: dict[str, Any]) -> str:
    machine = results["machine"]
    lines = ["# Benchmark results", ""]
    if results["quick"]:
        lines += [
            "> **Quick run** (`make bench-quick`): small sizes, one run of each variant. It shows",
            "> that every variant runs end to end; its numbers are noisy and are not the",
            "> benchmark. `make bench` runs the full sizes, three times each.",
            "",
        ]
    command = results.get("command", "bench/run.py")
    lines += [
        f"Generated by `{command}` (raw runs: results.json beside this file), "
        f"started {results['started']}, "
        f"finished {results.get('finished', '(unfinished)')}, vane at commit "
        f"`{machine['git_commit']}`. Each variant ran {results['repetitions']} time(s), "
        "round-robin across variants. Do not edit by hand: rerun `make bench`, or "
        "`python bench/report.py` to redraw from results.json. How to read it: "
        "`bench/README.md`.",
        "",
        "## Machine",
        "",
        *table(
            ["cpus", "cpu", "memory", "platform", "load average at start", "at end"],
            [
                [
                    str(machine["cpu_count"]),
                    machine["cpu_model"] or "?",
                    f"{machine['memory_bytes'] / 2**30:.1f} GiB",
                    machine["platform"],
                    ", ".join(f"{x:.2f}" for x in machine["load_average_at_start"]),
                    ", ".join(f"{x:.2f}" for x in machine.get("load_average_at_end", [])),
                ]
            ],
        ),
        "",
        "## Versions",
        "",
    ]
    rows = []
    for venv, found in results["versions"].items():
        if "error" in found:
            rows.append([venv, "error", str(found["error"])])
            continue
        packages = ", ".join(f"{k} {v or 'not installed'}" for k, v in found["packages"].items())
        rows.append([venv, found["python"], packages])
    lines += [*table(["interpreter", "python", "packages"], rows), ""]

    settings = results["settings"]
    for name, labels in results["workloads"].items():
        runs = [r for r in results["runs"] if r["workload"] == name]
        variants = [Variant(label, [r for r in runs if r["case"] == label]) for label in labels]
        variants = [v for v in variants if v.runs]
        if not variants:
            continue
        about = ABOUT[name].format(
            latency=settings["prompt_latency_s"], in_flight=settings["in_flight"]
        )
        rows_note = ""
        if name not in ("memory", "first_result"):
            rows_note = f" {int(variants[0].runs[0]['input_rows']):,} rows."
        lines += [f"## {name}", "", about + rows_note, ""]
        if name == "memory":
            lines += memory_section(variants)
        elif name == "first_result":
            lines += first_section(variants)
        else:
            lines += throughput_section(name, variants)
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else BENCH
    results = json.loads((directory / "results.json").read_text())
    (directory / "RESULTS.md").write_text(render(results))


if __name__ == "__main__":
    main()
