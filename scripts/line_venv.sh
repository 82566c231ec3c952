#!/usr/bin/env bash
# A Python venv for one Spark line's plugin tier: .venv-spark<line> (git-ignored) with the project (editable),
# the pyspark of that line from PyPI and what the plugin tier's tests and the benches use (numpy: bench/
# bench_streaming_sink.py's input) and dbt (the [dbt] extra: dbt-spark's session method runs the line's pyspark;
# pyspark's pin in the same install keeps pip from moving it), pyiceberg's Hive and Glue clients (the [hive]/[glue]
# extras: the Hive/Glue JVM tests, tests/integration/test_hive_glue_catalogs.py -k "lake_consistent or jvm", on the
# line); no notebooks (the whole suite runs on the default line's .venv). Idempotent: a stamp records the line's pin,
# the extras and pyproject's hash.
#   bash scripts/line_venv.sh 4.0      prints the venv's python
set -euo pipefail
cd "$(dirname "$0")/.."
LINE=${1:?usage: line_venv.sh LINE (3.5, 4.0, ...)}
# the pyspark each line's plugin jar is built against (jvm/spark-<line>/pom.xml's spark.version)
pom=jvm/spark-$LINE/pom.xml
[ -f "$pom" ] || { echo "line_venv: no Spark line $LINE (no $pom)" >&2; exit 2; }
PYSPARK=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$pom" | head -n1)
VENV=.venv-spark$LINE
STAMP=$VENV/.installed
want="pyspark==$PYSPARK dbt hive glue $(sha256sum <pyproject.toml | cut -c1-16)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  echo "line_venv: installing $VENV (pyspark==$PYSPARK)" >&2
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q -e ".[duckdb,openlineage,dbt,hive,glue]" "pyspark==$PYSPARK" "pytest>=8" "hypothesis>=6.100" \
    "pyiceberg[sql-postgres]>=0.12,<0.13" "moto[server]>=5.0" "boto3>=1.34" "build>=1.2" "twine>=5" numpy >&2
  echo "$want" >"$STAMP"
fi
echo "$VENV/bin/python"
