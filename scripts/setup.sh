#!/usr/bin/env bash
# Idempotent set-up: .venv with the pinned stack, Java + JDBC drivers for Spark, rendered spark-conf.
# Re-running is cheap: each step checks first and does nothing when already done.
#
#   bash scripts/setup.sh demo   what `make demo` needs: the project with its Spark extra, Java, the SQLite
#                                JDBC driver, the rendered spark-conf and the JVM pieces (scripts/build_jvm.sh)
#   bash scripts/setup.sh test   (the default; `make setup`, `make test`) all of demo, plus what only the
#                                tests and benchmarks use: the dev extra (pytest, DuckDB, notebooks, moto, ...),
#                                the PostgreSQL server and JDBC driver, and Spark's S3A jars (~190 MB)
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

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
[ -f /usr/share/java/sqlite-jdbc.jar ] || need_apt+=(libxerial-sqlite-jdbc-java)
if [ "$MODE" = test ]; then  # the PostgreSQL backend tests: the JDBC driver for Spark, a server they start themselves
  [ -f /usr/share/java/postgresql.jar ] || need_apt+=(libpostgresql-jdbc-java)
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

# The JVM pieces (the Spark catalog plugin, the tests' REST catalog), compiled with javac into build/jvm.
bash scripts/build_jvm.sh

# spark-conf/spark-defaults.conf with this machine's jar paths (the runtime jar comes from PyPI; the
# consistent catalog's plugin jar from build/jvm).
$VENV/bin/consistent-catalog spark-conf --write spark-conf/spark-defaults.conf >/dev/null

# Spark's S3A (hadoop-aws 3.3.1 + AWS SDK bundle 1.11.901, matching pyspark's Hadoop 3.3.4 closely enough):
# both jars ship inside the PyPI sdist sagemaker-pyspark==1.4.5. Download it (not installed), keep only the
# two jars under build/ (git-ignored; never commit jars). Used by the S3 backend tests and spark-conf/;
# test set-up only (the demo's warehouse is a local directory).
S3A_DIR=build/s3a-jars
if [ "$MODE" = test ] && { [ ! -f $S3A_DIR/hadoop-aws-3.3.1.jar ] || [ ! -f $S3A_DIR/aws-java-sdk-bundle-1.11.901.jar ]; }; then
  echo "setup: fetching the S3A jars (sagemaker-pyspark==1.4.5 sdist from PyPI)"
  mkdir -p build/sdist $S3A_DIR
  $VENV/bin/python -m pip download -q --no-deps --no-binary :all: --dest build/sdist sagemaker-pyspark==1.4.5
  $VENV/bin/python - build/sdist $S3A_DIR <<'PY'
import sys, tarfile, pathlib
sdist = next(pathlib.Path(sys.argv[1]).glob("sagemaker_pyspark-1.4.5*.tar.gz"), None) or next(pathlib.Path(sys.argv[1]).glob("sagemaker-pyspark-1.4.5*.tar.gz"))
wanted = {"hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar"}
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        name = pathlib.PurePosixPath(member.name).name
        if name in wanted and member.isfile():
            (pathlib.Path(sys.argv[2]) / name).write_bytes(tar.extractfile(member).read())
            wanted.discard(name)
if wanted:
    sys.exit(f"setup: {sorted(wanted)} not found in {sdist}")
PY
  rm -rf build/sdist
fi
