"""The Ray runner (``runner.py``): the same plan, lowered onto Ray Data (``lowering.py``), with
UDF steps on Ray actors of vane's own (``hosts.py``) that host vane's actor body (``actor.py``),
their counts kept by the driver's tallies (``tally.py``). See docs/ray.md.

This package's own module imports nothing: each of a step's actors imports ``actor.py``, a
process start in every action, and the runner's imports (DuckDB, the plan) would cost it a
fifth of a second more (``python -X importtime``)."""
