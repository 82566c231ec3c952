#!/usr/bin/env bash
# Build the JVM side with Maven: the reactor jvm/pom.xml (core, the shared Spark code, one module per Spark
# line, the tests' REST catalog server). Everything lands in the git-ignored build/jvm/<module>: classes,
# test-classes, the jars, `classpath` (what a test main or the REST server runs on) and, per Spark line,
# lib/ with the Iceberg runtime, the JDBC drivers and the S3 jars copied from Maven Central (what Python
# puts on spark.jars offline). `install` also puts the plugin jars into Maven's local repository (~/.m2), so
# `--packages io.consistentcatalog:lake-consistent-spark-<line>_<scala>:<version>` resolves on this machine.
#
# Maven's local repository is the cache: the first run downloads (≈1 GB: Spark, Iceberg, Hadoop's S3A), later
# runs are offline (-o; online again only when the offline run cannot resolve something, e.g. a new version).
# Idempotent and silent when nothing under jvm/ changed since the last build of the same goal and modules.
#
#   bash scripts/build_jvm.sh [MODULE...]   modules as in jvm/pom.xml (spark-3.5, rest-server, ...); default all
#   bash scripts/build_jvm.sh --tools-only  only install the JDK and Maven where missing (make dist)
#   CONSISTENT_MAVEN_GOAL=package            (default install) the wheel build packages without touching ~/.m2
#   CONSISTENT_JVM_TESTS=0                   skip the test mains (the wheel ships only the plugin jar)
#   CONSISTENT_NO_APT=1                      never apt-get (a package build): exit 1 naming what is missing
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build_jvm: $*" >&2; exit 1; }

need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v "${CONSISTENT_MVN:-mvn}" >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  if [ "${CONSISTENT_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "build_jvm: installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null
  else
    die "missing ${need[*]}: sudo apt-get install -y ${need[*]}"
  fi
fi
[ "${1:-}" != --tools-only ] || exit 0

MVN=${CONSISTENT_MVN:-mvn}
GOAL=${CONSISTENT_MAVEN_GOAL:-install}
args=(-B -q -f jvm/pom.xml "$GOAL")
if [ $# -gt 0 ]; then
  for module in "$@"; do [ -f "jvm/$module/pom.xml" ] || die "no module jvm/$module (jvm/*/pom.xml)"; done
  args+=(-pl "$(IFS=,; echo "$*")" -am)
fi
[ "${CONSISTENT_JVM_TESTS:-1}" != 0 ] || args+=(-Dmaven.test.skip=true)

mkdir -p build/jvm
if command -v flock >/dev/null 2>&1; then  # two test sessions building at once
  exec 9>build/jvm/.lock
  flock 9
fi

# Up to date: the same command built after every file under jvm/ was last changed.
key=$(printf '%s\n' "${args[*]}" | sha256sum | cut -c1-16)
stamp=build/jvm/.built-$key
if [ -f "$stamp" ] && [ -z "$(find jvm -newer "$stamp" -print -quit)" ]; then
  exit 0
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Offline first when the local repository has been filled before; online when that cannot resolve.
if [ -d "${HOME}/.m2/repository/org/apache/iceberg" ] && "$MVN" -o "${args[@]}" >"$log" 2>&1; then
  :
elif "$MVN" "${args[@]}" >"$log" 2>&1; then
  :
else
  grep -E '^\[(ERROR|WARNING)\]' "$log" | head -n 60 >&2 || tail -n 60 "$log" >&2
  die "mvn ${args[*]} failed"
fi
rm -f build/jvm/.built-"$key"
touch "$stamp"
