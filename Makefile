# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
DEMO_DIR ?= .demo
EPOCHS ?= 6
ROWS ?= 1000
PYTEST_ARGS ?=
# The Spark line: empty is the default line (consistent_catalog.spark.lines.DEFAULT_LINE, .venv, the whole suite);
# another (make test SPARK=4.0) runs the plugin's tier on that line with its own venv (.venv-spark<line>).
SPARK ?=
DEFAULT_SPARK := 4.1
OTHER_SPARK_LINES := 3.5 4.0
# The plugin's tier: what runs on every supported line.
# The Thrift server (beeline, tests/spark/test_spark_thrift.py) too: it runs from each line's pyspark jars.
# The PySpark epoch jobs over the REST catalog (tests/spark/test_spark_rest.py): the lines with Iceberg 1.11+ refresh
# a REST table by a conditional load (304), which only they run.
PLUGIN_TIER ?= tests/spark/test_spark_catalog_plugin.py tests/spark/test_sql_writer.py tests/conformance \
  tests/spark/test_spark_thrift.py tests/spark/test_spark_rest.py
# Native streaming (sinks into roots, epoch jobs, two sources): test_streaming.py's quick native tests; its kill
# tests (minutes each) and the Python streaming job run on the default line.
PLUGIN_TIER_STREAMING ?= tests/spark/test_streaming.py -k "native and not sigkill and not survives"
# The SQL writers' crash and zombie tests: an epoch killed at each failpoint on SQLite and replayed once, a keyed ingest
# killed before its commit, a fenced zombie. On the default line only (CI time; the code under them is the shared
# core's, not the line's): the PostgreSQL failpoint and the edited statement's kills (the random-kill loop: test-stress).
PLUGIN_TIER_CRASH ?= tests/spark/test_sql_writer_crash.py -k "not random_moments and not postgres and not edited_statement"

.PHONY: setup setup-demo test test-line test-stress test-fast lint-imports demo bench bench-all dist clean

# the test set-up: everything (scripts/setup.sh test); the demo's fetches only what the demo needs
setup:
	@bash scripts/setup.sh test

setup-demo:
	@bash scripts/setup.sh demo

ifeq ($(filter-out $(DEFAULT_SPARK),$(SPARK)),)
# the whole suite on the default line, then the plugin's tier on every other line, one venv per line, in sequence
# The other lines' venvs are made (one pip at a time) while the whole suite runs, then their tiers run two at a time.
test: setup lint-imports
	@mkdir -p build && (for line in $(OTHER_SPARK_LINES); do bash scripts/line_venv.sh $$line || exit 1; done) \
	  >build/line-venvs.log 2>&1 & venvs=$$!; \
	  $(PY) -m pytest --durations=30 -m "not stress" $(PYTEST_ARGS); status=$$?; \
	  wait $$venvs || { cat build/line-venvs.log >&2; echo "make test: the venv of a Spark line could not be made" >&2; exit 1; }; \
	  exit $$status
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(addprefix line-tier-,$(OTHER_SPARK_LINES))
else
test: test-line
endif

# the plugin's tier on one Spark line (SPARK=4.0): its venv, the JVM reactor built, its plugin jar picked by pyspark
test-line: setup
	@$(MAKE) --no-print-directory line-tier-$(SPARK)

# one line's tier once the set-up ran. `make test` runs the other lines' two at a time: each is mostly JVM start-ups,
# servers and waits, which two of them share the 2 cores well (free ports, temporary folders and venvs of their
# own); --output-sync prints each line's output whole when it ends
line-tier-%:
	@py=$$(bash scripts/line_venv.sh $*) && echo "== the plugin's tier on Spark $* ($$py)" && \
	  $$py -m pytest $(PLUGIN_TIER) $(PYTEST_ARGS) && $$py -m pytest $(PLUGIN_TIER_STREAMING) $(PYTEST_ARGS) && \
	  $$py -m pytest $(PLUGIN_TIER_CRASH) $(PYTEST_ARGS)

# the random and exhaustive kill loops (marker stress): minutes each, beyond the chosen-point kills make test runs
test-stress: setup lint-imports
	$(PY) -m pytest -m stress $(PYTEST_ARGS)

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
	$(PY) -m bench.bench_streaming_update --keys 1000000,200000 --changed 10000 --markdown
	$(PY) -m bench.bench_catalogs --markdown

# dist/: the sdist and a wheel with the Spark plugin jar of each line inside, checked (twine check, jar manifests).
# Needs a JDK and Maven only (scripts/build_jvm.sh installs them with apt where missing), not the test set-up.
dist:
	@bash scripts/build_jvm.sh --tools-only
	@bash scripts/dist.sh

clean:
	rm -rf $(DEMO_DIR) .pytest_cache build dist src/*.egg-info
