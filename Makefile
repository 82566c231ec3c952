# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
DEMO_DIR ?= .demo
EPOCHS ?= 6
ROWS ?= 1000
PYTEST_ARGS ?=

.PHONY: setup setup-demo test test-fast lint-imports demo bench bench-all dist clean

# the test set-up: everything (scripts/setup.sh test); the demo's fetches only what the demo needs
setup:
	@bash scripts/setup.sh test

setup-demo:
	@bash scripts/setup.sh demo

test: setup lint-imports
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup lint-imports
	$(PY) -m pytest -m "not spark and not slow and not integration and not notebook" $(PYTEST_ARGS)

# the layer contract in pyproject.toml ([tool.importlinter]): no module imports upwards
lint-imports: setup
	.venv/bin/lint-imports --no-cache

demo: setup-demo
	.venv/bin/consistent-catalog demo --dir $(DEMO_DIR) --epochs $(EPOCHS) --rows-per-epoch $(ROWS)

bench: setup
	$(PY) -m bench.bench_resolve --markdown

bench-all: bench
	$(PY) -m bench.bench_spark_overhead --rows 1000000 --epochs 16 --markdown
	$(PY) -m bench.bench_freshness --epochs 32 --rows 1000 --interval 5 --markdown
	$(PY) -m bench.bench_reliability --kills 100 --seed 1 --markdown
	$(PY) -m bench.bench_backends --faults 0,10,25 --markdown
	$(PY) -m bench.bench_retention --epochs 2000 --markdown
	$(PY) -m bench.bench_streaming --part both --files 60 --words 200 --rows 100000 --rounds 6 --batches 6 --markdown
	$(PY) -m bench.bench_plugin --repeat 15 --markdown
	$(PY) -m bench.bench_sql_writer
	$(PY) -m bench.bench_streaming_sink

# dist/: the sdist and a wheel with the Spark plugin jar inside, checked (twine check, jar manifest)
dist: setup
	@bash scripts/dist.sh

clean:
	rm -rf $(DEMO_DIR) .pytest_cache build dist src/*.egg-info
