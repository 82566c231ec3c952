# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
DEMO_DIR ?= .demo
EPOCHS ?= 6
ROWS ?= 1000
PYTEST_ARGS ?=

.PHONY: setup test test-fast demo bench clean

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not spark and not slow and not integration and not notebook" $(PYTEST_ARGS)

demo: setup
	.venv/bin/consistent-catalog demo --dir $(DEMO_DIR) --epochs $(EPOCHS) --rows-per-epoch $(ROWS)

bench: setup
	$(PY) bench/bench_resolve.py --markdown

clean:
	rm -rf $(DEMO_DIR) .pytest_cache build src/*.egg-info
