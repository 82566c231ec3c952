#!/usr/bin/env bash
# Idempotent set-up: .venv with the pinned stack, the JVM build (Maven), rendered spark-conf.
# Re-running is cheap: each step checks first and does nothing when already done.
#
#   bash scripts/setup.sh demo   what `make demo` needs: the project with its Spark extra, a JDK and Maven, the
#                                JVM reactor built (scripts/build_jvm.sh: the plugin, and the Iceberg runtime and
#                                JDBC drivers copied from Maven Central into build/jvm/spark-<line>/lib) and the
#                                rendered spark-conf
#   bash scripts/setup.sh test   (the default; `make setup`, `make test`) all of demo, plus what only the
#                                tests and benchmarks use: the dev extra (pytest, DuckDB, notebooks, moto, ...)
#                                and the PostgreSQL server (Spark's S3A jars come with the Maven build)
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-test}
case $MODE in
  demo | test) ;;
  *) echo "usage: bash scripts/setup.sh [demo|test]  (default: test)" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed

need_apt=()  # the JDK and Maven: scripts/build_jvm.sh installs them where missing
if [ "$MODE" = test ]; then  # the PostgreSQL backend tests start a server of their own (the JDBC driver is Maven's)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need_apt[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "setup ($MODE) needs: sudo apt-get install -y ${need_apt[*]}" >&2
  fi
fi

if [ ! -x $VENV/bin/python ]; then
  echo "setup: creating $VENV"
  $PYTHON -m venv $VENV
fi
# The stamp records pyproject.toml's hash and the extra installed; dev includes spark, so a test set-up
# also satisfies the demo's.
if [ "$MODE" = test ]; then extra=dev; else extra=spark; fi
hash=$(sha256sum <pyproject.toml | cut -c1-16)
have=$(cat $STAMP 2>/dev/null || true)
if [ "$have" != "$hash $extra" ] && [ "$have" != "$hash dev" ]; then
  echo "setup: installing the project and its pinned dependencies ([$extra]) into $VENV"
  $VENV/bin/python -m pip install -q --upgrade pip
  $VENV/bin/python -m pip install -q -e ".[$extra]"
  echo "$hash $extra" > $STAMP
fi

# The JVM reactor with Maven (jvm/pom.xml: the plugin per Spark line, the tests' REST catalog server), into
# build/jvm; the Iceberg runtime, the JDBC drivers and the S3A jars are copied from Maven Central into
# build/jvm/spark-<line>/lib. Offline once ~/.m2 holds them.
bash scripts/build_jvm.sh
# test only: servers we did not write (Iceberg's REST fixture) and OpenLineage's Spark listener, into build/third-party
[ "$MODE" != test ] || bash scripts/third_party_servers.sh

# spark-conf/spark-defaults.conf with this machine's jar paths (build/jvm/spark-<line>).
$VENV/bin/consistent-catalog spark-conf --write spark-conf/spark-defaults.conf >/dev/null
