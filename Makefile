# The two commands at the top of the README: `make demo` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PACKAGES := awooop streams projections
# Two test processes: the suite mostly waits (servers, subprocesses, leases running out), and
# each test has its own database and Redis key prefix. PYTEST_ARGS='-n 0' runs it in one.
PYTEST_ARGS ?= -n 2

.PHONY: install services lint test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

services: install
	$(PY) -m tests.support.services

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict $(PACKAGES)
	$(VENV)/bin/lint-imports

test: services lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/awooop demo

bench: install
	$(PY) ops/bench/all.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
