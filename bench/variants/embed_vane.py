"""embed, vane: read_parquet -> map_batches(Embedder class) -> write_parquet, on the local runner
with one backend (``--backend thread`` or ``subprocess_actor``) or on a local Ray cluster
(``--runner ray``: ``ray.init(num_cpus=2)`` as for Ray Data, then
``vane.configure(runner="ray")``, so the step runs on one Ray actor). The model loads once,
inside the actor. ``--resume`` writes with ``resume=True`` (what keeping each batch's answer
costs); ``--killed-at 0.5`` times the rerun of a resumable write killed half-way (the kill,
in a child process, is untimed). ``--first``: the seconds to the pipeline's first rows
(``iter_batches``: a step's first answered batch), model load included (first_rows); with
``--kept`` too, those of a second action, after a first one (untimed) that took its first rows
and let go: the step's actors and workers kept between them (worker_idle_timeout_s), the model
loaded anew."""

from __future__ import annotations

import argparse

import benchlib

Embedder = benchlib.Embedder


def main(args: argparse.Namespace) -> dict[str, object]:
    vane = benchlib.import_vane(resume=bool(benchlib.resume_option(args)))

    record: dict[str, object] = {}
    if args.runner == "ray":
        # The same cluster as the Ray Data variant, started the same way; vane connects to it.
        # ray.init is timed apart (engine start), as for Ray Data.
        record["startup_s"] = benchlib.start_ray()
        vane.configure(runner="ray")
    vane.configure(progress=False)
    if args.killed_at:
        record.update(benchlib.kill_at(args))
    embedded = vane.read_parquet(args.data).map_batches(
        Embedder,
        schema={"id": "BIGINT", "embedding": f"FLOAT[{benchlib.EMBED_DIM}]"},
        batch_size=args.batch_size,
        execution_backend=args.backend,
    )
    if args.first:
        if args.kept:  # an earlier action of the session, whose step's actors stay
            earlier = embedded.iter_batches()
            next(earlier)
            earlier.close()  # type: ignore[attr-defined]
        with benchlib.Stopwatch() as watch:
            batches = embedded.iter_batches()
            first = next(batches)
        batches.close()  # type: ignore[attr-defined]  # a generator: closing it ends the action
        return {"rows": first.num_rows, "seconds": watch.seconds, **record}
    with benchlib.Stopwatch() as watch:
        result = embedded.write_parquet(args.out + "/", resume=benchlib.resume_option(args))
    if args.runner == "ray":
        import ray

        ray.shutdown()  # at exit, for --first
    if args.killed_at:
        record["rows_resumed"] = result.steps[0].rows_resumed
    return {"rows": result.rows, "seconds": watch.seconds, **record}


if __name__ == "__main__":
    parser = benchlib.parser(__doc__)
    parser.add_argument("--runner", default="local", choices=["local", "ray"])
    parser.add_argument(
        "--backend",
        choices=["thread", "subprocess_actor", "ray_actor"],
        help="the UDF step's backend (default: thread locally, ray_actor on Ray)",
    )
    benchlib.resume_arguments(parser)
    benchlib.first_arguments(parser)
    parser.add_argument(
        "--kept", action="store_true", help="with --first: time a second action's first rows"
    )
    args = parser.parse_args()
    if args.backend is None:
        args.backend = "ray_actor" if args.runner == "ray" else "thread"
    name = f"vane-{args.backend}" if args.runner == "local" else "vane-ray"
    benchlib.run("first_rows" if args.first else "embed", name, lambda: main(args))
