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

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py $(if $(BENCH_PLOT),--plot $(BENCH_PLOT)) $(BENCH_ARGS)
	$(BIN)/python benchmarks/telemetry.py $(BENCH_PG)
	$(BIN)/python benchmarks/flow_control.py $(BENCH_PG)
	$(BIN)/python benchmarks/latency.py $(BENCH_PG)
	$(BIN)/python benchmarks/big_database.py
	$(BIN)/python benchmarks/distance.py

lint: $(STAMP)
	$(BIN)/ruff format src tests examples benchmarks
	$(BIN)/ruff check --fix src tests examples benchmarks

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache
