#!/usr/bin/env bash
# Idempotent set-up: .venv with the pinned stack, Java + JDBC drivers for Spark, rendered spark-conf.
# Re-running is cheap: each step checks first and does nothing when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
[ -f /usr/share/java/sqlite-jdbc.jar ] || need_apt+=(libxerial-sqlite-jdbc-java)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup: Spark needs: sudo apt-get install -y ${need_apt[*]}" >&2
  fi
fi

if [ ! -x $VENV/bin/python ]; then
  echo "setup: creating $VENV"
  $PYTHON -m venv $VENV
fi
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat $STAMP 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the project and its pinned dependencies into $VENV"
  $VENV/bin/python -m pip install -q --upgrade pip
  $VENV/bin/python -m pip install -q -e '.[dev]'
  echo "$want" > $STAMP
fi

# spark-conf/spark-defaults.conf with this machine's jar paths (the runtime jar comes from PyPI).
$VENV/bin/python -m consistent_catalog.spark.session --write-conf spark-conf/spark-defaults.conf >/dev/null
