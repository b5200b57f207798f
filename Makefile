# Fleetwatch: `make demo` runs it all on the embedded default; `make check` is the quick
# loop (no process, no browser); `make test` runs the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo check test lint fmt typecheck venv bench dist clean

# Two distributions from this checkout (docs/architecture.md "Distributions"): the node
# agent, packaging/agent/pyproject.toml, and the server, pyproject.toml, which needs the
# agent's for the wire protocol. Both are installed editable here.
$(STAMP): pyproject.toml packaging/agent/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e './packaging/agent[facility]' -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	FLEETWATCH_TESTING=1 SECRET_KEY=typecheck-only-not-secret $(BIN)/mypy .

# Test files run side by side in TEST_WORKERS processes (pytest-xdist; a file's tests stay
# together, so a module's server or scenario starts once): most of the suite's time is
# spent waiting on servers, workers and simulated physics, not on the CPU.
TEST_WORKERS ?= 3

# The embedded tier always; the PostgreSQL + Redis tier where they answer
# (FLEETWATCH_TEST_DATABASE_URL / _REDIS_URL, else DATABASE_URL / REDIS_URL,
# else the local ports). REQUIRE_SERVICES=1 makes a missing service fatal; REQUIRE_BROWSER=1
# does the same for Debian's chromium (browser tests skip without it).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	FLEETWATCH_TESTING=1 SECRET_KEY=typecheck-only-not-secret $(BIN)/mypy .
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

# Lint, types and every test that starts no process, no browser and needs no PostgreSQL or
# Redis (tests/support/speeds.py marks the others `process`; FLEETWATCH_CHECK=1 fails any
# test here that starts a process anyway).
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	FLEETWATCH_TESTING=1 SECRET_KEY=typecheck-only-not-secret $(BIN)/mypy .
	FLEETWATCH_CHECK=1 $(BIN)/pytest -q -m "not process and not browser and not services"

demo: $(STAMP)
	$(BIN)/python -m fleetwatch.demo

# dist/: fleetwatch-agent and fleetwatch, a wheel and an sdist each.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist packaging/agent
	$(BIN)/python -m build --no-isolation --outdir dist .

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf var dist .pytest_cache .mypy_cache .ruff_cache
