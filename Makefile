# The two commands at the top of the README: `make demo` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# The one import package; awooop/streams and awooop/projections link to the folders streams/ and
# projections/, which mypy and lint-imports follow and compileall does not (SOURCES).
PACKAGES := awooop
SOURCES  := awooop streams projections
# Six test processes on two cores: the suite mostly waits (servers, subprocesses, leases
# running out; four processes kept the cores 44 % busy), and each test has its own database and
# Redis key prefix; the six share a budget of the server's free connections
# (tests/support/budget.py). PYTEST_ARGS='-n 0' runs it in one.
PYTEST_ARGS ?= -n 6

.PHONY: install bytecode test-bytecode test-deps services lint test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Every process imports the project's modules from source: where PYTHONDONTWRITEBYTECODE is set
# (as on CI's machines) nothing caches their bytecode, and each start compiled all of them again
# (0.8 of the 2 s an `awooop` command took to start on a slow 2-core machine; the tests start
# hundreds of processes). compileall writes it once and recompiles only what changed since.
bytecode: install
	$(PY) -m compileall -q $(SOURCES) tests >/dev/null

# pytest rewrites the asserts of each test module it imports, in every test process, and caches
# the rewritten code only where bytecode may be written: with PYTHONDONTWRITEBYTECODE set each of
# the six processes rewrote all the test modules again (8.5 s of CPU to collect, 2.8 s with the
# cache). One collection allowed to write the cache does it once (and later only for what
# changed); its output is shown only when it fails.
test-bytecode: bytecode
	@out=$$(env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest --collect-only -q -n 0 2>&1) \
		|| { echo "$$out" | tail -n 60; exit 1; }

# The system packages the tests need (pg_auto_failover, iproute2, Chromium, promtool and
# prometheus, the PostgreSQL and Redis server binaries), installed when missing: as root with
# apt, else it stops and names the one command (sudo ops/install-test-deps.sh). .ci/run too.
test-deps:
	bash ops/install-test-deps.sh

services: install
	$(PY) -m tests.support.services

# floors.py: no runtime module over 400 lines, no error code literal outside the catalog, no
# import of streams/projections by their folder's name (awooop.streams, awooop.projections).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) ops/lint/floors.py
	$(VENV)/bin/mypy --strict $(PACKAGES)
	$(VENV)/bin/lint-imports

test: test-deps services lint test-bytecode
	$(PY) -m pytest -q $(PYTEST_ARGS)

demo: install bytecode
	$(VENV)/bin/awooop demo

bench: install bytecode
	$(PY) ops/bench/all.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
