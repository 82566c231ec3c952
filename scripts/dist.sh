#!/usr/bin/env bash
# `make dist`: the sdist and the wheel (built from that sdist, as pip would) in dist/ (git-ignored), checked.
# The wheel must contain the Spark plugin jar of every supported line: CONSISTENT_REQUIRE_PLUGIN_JAR=1 makes a
# missing one fail the build. A wheel build needs a JDK, Maven and the compile dependencies (Maven Central or
# ~/.m2) only: not the test environment. The Python side is a small venv with `build` and `twine`
# (build/dist-venv, git-ignored) unless PYTHON names an interpreter that has both.
# Then `twine check --strict` (the metadata PyPI would render) and build_support/check_dist.py (jars,
# manifest versions, sdist contents).
#   PYTHON=/path/to/python bash scripts/dist.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
else
  PY=build/dist-venv/bin/python
  if ! { [ -x "$PY" ] && "$PY" -c "import build, twine" 2>/dev/null; }; then
    echo "dist: creating build/dist-venv (build, twine)"
    python3 -m venv build/dist-venv
    "$PY" -m pip install -q build twine
  fi
fi
for module in build twine; do
  "$PY" -c "import $module" 2>/dev/null || { echo "dist: $PY lacks '$module'; pip install build twine" >&2; exit 1; }
done
rm -rf dist
log=$(mktemp)
trap 'rm -f "$log"' EXIT
CONSISTENT_REQUIRE_PLUGIN_JAR=1 "$PY" -m build --outdir dist . >"$log" 2>&1 \
  || { tail -n 40 "$log" >&2; echo "dist: python -m build failed" >&2; exit 1; }
grep -h "consistent-catalog build:" "$log" || true  # what the build says about the plugin jars
"$PY" -m twine check --strict dist/*
"$PY" -m build_support.check_dist dist
