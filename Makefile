# Two commands for a fresh machine (see README): `make demo` and `make test`.
# Each creates .venv and installs what it needs; nothing else is assumed on the machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test test-stress lint install clean bench bench-quick

# torch first, pinned: 2.13.0 is a local CPU wheel on our machines; letting another package pull
# torch in would fetch a multi-GB CUDA build.
TORCH := torch==2.13.0

# The suite runs on two worker processes (pytest-xdist), one a core on CI's 2-core machine: much
# of a test's time is waiting on processes it started. tests/conftest.py groups the tests (all the
# Ray ones on one worker, each other module whole on one). PYTEST_WORKERS= runs it in one process.
PYTEST_WORKERS ?= -n 2 --dist loadgroup

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The stamp files re-run an install only when pyproject.toml changes.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[dev]'
	touch $@

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[demo]'
	touch $@

install: $(VENV)/.installed-dev

demo: $(VENV)/.installed-demo
	HF_HUB_OFFLINE=1 $(BIN)/python examples/demo.py

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check vane tests examples bench
	$(BIN)/ruff format --check vane tests examples bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: $(VENV)/.installed-dev
	$(BIN)/ruff check vane tests examples bench
	$(BIN)/ruff format --check vane tests examples bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest $(PYTEST_WORKERS)

# The same suite on a busy machine: two processes keep two cores busy beside it (.ci/busy.py
# starts them and ends them with the suite). No test may depend on how much happens within
# some wall-clock time; this is where one that does shows it. VANE_KILL_MATRIX=full runs the
# whole kill matrix of resumable writes (tests/integration/test_kill_matrix.py: 30+ kills a sink).
test-stress: $(VENV)/.installed-dev
	$(BIN)/ruff check vane tests examples bench
	$(BIN)/ruff format --check vane tests examples bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	VANE_KILL_MATRIX=full $(BIN)/python .ci/busy.py 2 -- $(BIN)/python -m pytest $(PYTEST_WORKERS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The benchmark (bench/README.md). Vane's variants run in .venv with psutil added (the driver
# needs it; vane itself does not). Daft and Ray Data run in .bench-venv so that no peer's
# dependencies meet vane's.
BENCH_VENV := .bench-venv
BENCH_PIP := $(BENCH_VENV)/bin/python -m pip

$(VENV)/.installed-bench: $(VENV)/.installed-dev
	$(PIP) install --quiet psutil
	touch $@

$(BENCH_VENV)/.installed: bench/requirements-peers.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PIP) install --quiet --upgrade pip
	$(BENCH_PIP) install --quiet $(TORCH)
	$(BENCH_PIP) install --quiet -r bench/requirements-peers.txt
	touch $@

bench: $(VENV)/.installed-bench $(BENCH_VENV)/.installed
	HF_HUB_OFFLINE=1 $(BIN)/python bench/run.py

bench-quick: $(VENV)/.installed-bench $(BENCH_VENV)/.installed
	HF_HUB_OFFLINE=1 $(BIN)/python bench/run.py --quick

# The declared floors, tested: a separate venv with the lowest duckdb, pyarrow and ray that
# pyproject.toml allows (pinned with == from its ">=" lines, so the two never drift apart), then
# the unit and conformance suites. Other packages resolve as usual.
FLOORS_VENV := .floors-venv
FLOORS_PIP := $(FLOORS_VENV)/bin/python -m pip
FLOORS_PINS := $(FLOORS_VENV)/floors.txt

.PHONY: test-floors

$(FLOORS_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_PIP) install --quiet --upgrade pip
	sed -n 's/.*"\(duckdb\|pyarrow\|ray\)\(\[data\]\)\{0,1\}>=\([0-9.]*\).*/\1==\3/p' \
		pyproject.toml > $(FLOORS_PINS)
	test "$$(wc -l < $(FLOORS_PINS))" -eq 3  # each of the three has a floor in pyproject.toml
	$(FLOORS_PIP) install --quiet $(TORCH)
	$(FLOORS_PIP) install --quiet --constraint $(FLOORS_PINS) -e '.[dev]'
	touch $@

test-floors: $(FLOORS_VENV)/.installed
	$(FLOORS_VENV)/bin/python -m pip list 2>/dev/null | grep -iE '^(duckdb|pyarrow|ray) '
	$(FLOORS_VENV)/bin/python -m pytest -p no:cacheprovider tests/unit tests/conformance
