# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
DEMO_DIR ?= .demo
EPOCHS ?= 6
ROWS ?= 1000
PYTEST_ARGS ?=

.PHONY: setup test test-fast demo bench bench-all clean

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

bench-all: bench
	$(PY) bench/bench_spark_overhead.py --rows 1000000 --epochs 16 --markdown
	$(PY) bench/bench_freshness.py --epochs 32 --rows 1000 --interval 5 --markdown
	$(PY) bench/bench_reliability.py --kills 100 --seed 1 --markdown
	$(PY) bench/bench_backends.py --markdown
	$(PY) bench/bench_retention.py --epochs 2000 --markdown

clean:
	rm -rf $(DEMO_DIR) .pytest_cache build src/*.egg-info
