# Quick start: `make demo` runs a real cluster crawl, `make test` runs the tests in parallel
# (pytest-xdist; `make unit`: only the unit tier, in seconds, without Redis; `make chaos`: the
# random kill and freeze soaks alone, one at a time, CHAOS_RUNS runs each).
# Both set up everything they need in .venv on a fresh machine. `make compat` runs Scrapy's own
# tests with the add-on switched on (compat/README.md); it builds .compat/ the first time.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
#: pytest-xdist workers: the end-to-end tests mostly wait on their subprocesses, so 6 keep 2 cores
#: busy (1,484 tests: 5:03 with 4 workers, 4:08 with 6, on this 2-core machine)
TEST_WORKERS ?= 6
CHAOS_RUNS ?= 5

.PHONY: demo test unit chaos lint bench compat clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,demo,bench,sinks]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python example_project/demo.py

lint: $(BIN)/.installed
	$(BIN)/ruff check scrapy_clustersync testkit tests example_project bench compat
	$(BIN)/mypy

test: $(BIN)/.installed lint
	./scripts/ensure-redis-server.sh
	./scripts/ensure-tmux.sh
	./scripts/ensure-chromium.sh
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=15

unit: $(BIN)/.installed
	$(BIN)/pytest -q -n 0 tests/unit

chaos: $(BIN)/.installed
	./scripts/ensure-redis-server.sh
	CLUSTERSYNC_CHAOS_RUNS=$(CHAOS_RUNS) $(BIN)/pytest -q -n 0 -m chaos

bench: $(BIN)/.installed
	$(BIN)/python bench/run.py
	$(BIN)/python bench/polite.py
	$(BIN)/python bench/broad.py
	$(BIN)/python bench/item_heavy.py
	$(BIN)/python bench/bloom.py
	$(BIN)/python bench/seed.py
	$(BIN)/python bench/loadgen.py
	$(BIN)/python bench/dead_node.py
	$(BIN)/python bench/serve_latency.py
	$(BIN)/python bench/http_node.py

compat: $(BIN)/.installed
	./scripts/ensure-redis-server.sh
	$(BIN)/python -m compat.run

clean:
	rm -rf $(VENV) .compat .pytest_cache .mypy_cache .ruff_cache *.egg-info
