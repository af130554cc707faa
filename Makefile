# Quick start: `make demo` runs a real cluster crawl, `make test` runs the tests
# (`make unit`: only the unit tier, in seconds, without Redis).
# Both set up everything they need in .venv on a fresh machine. `make compat` runs Scrapy's own
# tests with the add-on switched on (compat/README.md); it builds .compat/ the first time.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test unit lint bench compat clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,demo,bench]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python example_project/demo.py

lint: $(BIN)/.installed
	$(BIN)/ruff check scrapy_clustersync testkit tests example_project bench compat
	$(BIN)/mypy

test: $(BIN)/.installed lint
	./scripts/ensure-redis-server.sh
	$(BIN)/pytest -q

unit: $(BIN)/.installed
	$(BIN)/pytest -q tests/unit

bench: $(BIN)/.installed
	$(BIN)/python bench/run.py
	$(BIN)/python bench/bloom.py
	$(BIN)/python bench/seed.py

compat: $(BIN)/.installed
	./scripts/ensure-redis-server.sh
	$(BIN)/python -m compat.run

clean:
	rm -rf $(VENV) .compat .pytest_cache .mypy_cache .ruff_cache *.egg-info
