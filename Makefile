# Two commands for a fresh machine (see README): `make demo` and `make test`.
# Each creates .venv and installs what it needs; nothing else is assumed on the machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The stamp files re-run an install only when pyproject.toml changes.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[dev]'
	touch $@

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

install: $(VENV)/.installed-dev

demo: $(VENV)/.installed-demo
	$(BIN)/python examples/demo.py

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check vane tests examples
	$(BIN)/mypy

test: $(VENV)/.installed-dev
	$(BIN)/ruff check vane tests examples
	$(BIN)/mypy
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
