# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/order_demo.py

test: $(STAMP)
	$(BIN)/ruff format --no-cache --check src tests examples benchmarks
	$(BIN)/ruff check --no-cache src tests examples benchmarks
	$(BIN)/python -m mypy
	$(BIN)/pyright --pythonpath $(BIN)/python -p pyproject.toml
	$(BIN)/python -m pytest -q -rs -n 2

# BENCH_ARGS go after --plot, so a --plot in them wins; BENCH_PLOT= draws no plot.
BENCH_PLOT ?= docs/benchmarks.png
# both stores by default: docs/benchmarks.md reports them side by side
BENCH_ARGS ?= --postgres
# the parts after run.py take the second store when run.py does
BENCH_PG = $(if $(filter --postgres --postgres-only,$(BENCH_ARGS)),--postgres)

# where one run of make bench leaves its figures; regenerate.py puts them into the page
BENCH_OUT ?= build/bench
BENCH_PAGE ?= docs/benchmarks.md

bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -eo pipefail -c
bench: $(STAMP)
	rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT)
	$(BIN)/python benchmarks/run.py --markdown $(BENCH_OUT)/results.md $(if $(BENCH_PLOT),--plot $(BENCH_PLOT)) $(BENCH_ARGS)
	if command -v valgrind >/dev/null; then $(BIN)/python benchmarks/profile_plait.py --callgrind --markdown $(BENCH_OUT)/instructions.md; else echo "no valgrind: instructions per step not counted"; fi
	$(BIN)/python benchmarks/telemetry.py $(BENCH_PG) | tee $(BENCH_OUT)/telemetry.txt
	$(BIN)/python benchmarks/flow_control.py $(BENCH_PG) | tee $(BENCH_OUT)/flow_control.md
	$(BIN)/python benchmarks/latency.py $(BENCH_PG) --markdown $(BENCH_OUT)/latency.md
	$(BIN)/python benchmarks/big_database.py | tee $(BENCH_OUT)/big_database.txt
	$(BIN)/python benchmarks/distance.py --markdown $(BENCH_OUT)/distance.md
	$(BIN)/python benchmarks/regenerate.py $(BENCH_PAGE) $(BENCH_OUT)

lint: $(STAMP)
	$(BIN)/ruff format src tests examples benchmarks
	$(BIN)/ruff check --fix src tests examples benchmarks

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache
