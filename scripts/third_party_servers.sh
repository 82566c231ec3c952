#!/usr/bin/env bash
# Servers we did not write, for the tests and benchmarks (docs/catalogs.md): Iceberg's REST fixture
# (org.apache.iceberg.rest.RESTCatalogServer) with the jars it runs on, copied from Maven Central by
# `mvn dependency:copy-dependencies` (scripts/third-party/pom.xml) into the git-ignored
# build/third-party/iceberg-rest-fixture-<version>. No jar is committed. Idempotent: a no-op when present.
# Project Nessie's server (nessie-quarkus) is not served by the registry this project builds from.
set -euo pipefail
cd "$(dirname "$0")/.."
POM=scripts/third-party/pom.xml
version=$(sed -n 's:.*<iceberg.version>\(.*\)</iceberg.version>.*:\1:p' $POM)
dest=build/third-party/iceberg-rest-fixture-$version
stamp=$dest/.complete
hash=$(sha256sum <$POM | cut -c1-16)
MVN=${CONSISTENT_MVN:-mvn}
if [ "$(cat $stamp 2>/dev/null || true)" != "$hash" ]; then
  rm -rf "$dest"
  mkdir -p "$dest"
  # offline first (~/.m2 is the cache), online when something is missing
  if ! $MVN -B -q -o -f $POM dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PWD/$dest" >/dev/null 2>&1; then
    $MVN -B -q -f $POM dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$PWD/$dest"
  fi
  echo "$hash" > $stamp
fi

# OpenLineage's Spark listener (one self-contained jar per Scala: 2.12 for Spark 3.5, 2.13 for Spark 4), for the
# test that joins our lineage with its events on whichever line the venv's pyspark is
OL_VERSION=1.53.0
for scala in 2.12 2.13; do
  ol=build/third-party/openlineage-spark_$scala-$OL_VERSION.jar
  if [ ! -s "$ol" ]; then
    $MVN -B -q -o dependency:copy -Dartifact=io.openlineage:openlineage-spark_$scala:$OL_VERSION -DoutputDirectory="$PWD/build/third-party" >/dev/null 2>&1 \
      || $MVN -B -q dependency:copy -Dartifact=io.openlineage:openlineage-spark_$scala:$OL_VERSION -DoutputDirectory="$PWD/build/third-party"
  fi
done
