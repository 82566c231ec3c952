#!/usr/bin/env bash
# `make dist`: the sdist and the wheel (built from that sdist, as pip would) in dist/ (git-ignored), checked.
# The wheel must contain the Spark plugin jar: CONSISTENT_REQUIRE_PLUGIN_JAR=1 makes its absence fail the
# build. The build environment is isolated (no pyspark), so the compile takes Spark's and Iceberg's jars
# from $PYTHON's environment (CONSISTENT_BUILD_PYTHON; build_support/plugin_jar.py lists the other ways).
# Then `twine check --strict` (the metadata PyPI would render) and build_support/check_dist.py (jar,
# manifest versions, sdist contents).
#   PYTHON=/path/to/python bash scripts/dist.sh   (default .venv/bin/python; needs the dev extra: build, twine)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "dist: $PY not found; run make setup (or set PYTHON)" >&2; exit 1; }
PY_ABS=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # absolute, not resolved: a venv's python is a link
for module in build twine; do
  "$PY" -c "import $module" 2>/dev/null || { echo "dist: $PY lacks '$module'; pip install -e '.[dev]' (make setup)" >&2; exit 1; }
done
rm -rf dist
log=$(mktemp)
trap 'rm -f "$log"' EXIT
CONSISTENT_BUILD_PYTHON=${CONSISTENT_BUILD_PYTHON:-$PY_ABS} CONSISTENT_REQUIRE_PLUGIN_JAR=1 \
  "$PY" -m build --outdir dist . >"$log" 2>&1 || { tail -n 40 "$log" >&2; echo "dist: python -m build failed" >&2; exit 1; }
grep -h "consistent-catalog build:" "$log" || true  # what the build says about the plugin jar
"$PY" -m twine check --strict dist/*
"$PY" -m build_support.check_dist dist
