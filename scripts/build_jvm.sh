#!/usr/bin/env bash
# Compile the small JVM helpers under jvm/<module>/src/main/java (e.g. the test REST catalog server)
# into build/jvm/<module>/classes with plain javac against jars already on this machine:
#   - the Iceberg Spark runtime jar from the PyPI package snowpark-connect-deps-iceberg
#     ($CONSISTENT_ICEBERG_JAR overrides, as in consistent_catalog.spark.session),
#   - pyspark's jars (Spark, Hadoop, slf4j/log4j for the runtime; $CONSISTENT_SPARK_JARS, a directory
#     such as .../site-packages/pyspark/jars, overrides),
#   - Debian's JDBC drivers in /usr/share/java ($CONSISTENT_JDBC_JARS, colon-separated, overrides).
# pyspark and the Iceberg package are looked up with $CONSISTENT_BUILD_PYTHON, else .venv/bin/python, else
# python3 (the wheel build, build_support/plugin_jar.py, passes the two jar variables instead).
# No Maven, no jar in git (build/ is git-ignored). Idempotent and silent when nothing changed: a module
# is rebuilt only when a file under its src/ is newer than its last build, or the classpath, javac or its
# flags changed. Next to the classes it writes `classpath` (the runtime classpath without the classes dir)
# and `java` (the java binary matching the javac used), which tests/harness/rest_server.py reads.
# Each module's jar (build/jvm/<module>.jar) has a manifest naming the project version and the Spark,
# Scala and Iceberg versions it was compiled against (read from the classpath's jar names).
# Test and benchmark mains (jvm/<module>/src/test/java, e.g. the conformance runner) compile against the
# module's classes into build/jvm/<module>/test-classes, packed into build/jvm/<module>-tests.jar (what a
# Spark session's spark.jars takes); never into the module's jar. CONSISTENT_JVM_TESTS=0 skips them (the
# wheel build, which ships only the module's jar).
# Without javac it installs openjdk-17-jdk-headless with apt-get when run as root, unless
# CONSISTENT_NO_APT=1 (a package build must not install system packages): then it exits 1 naming the way out.
# Usage: build_jvm.sh [MODULE...]  (default: every module; a module that fails to compile keeps its
# previous build, the others are still built, and the script exits 1 naming the failures).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=build/jvm

die() { echo "build_jvm: $*" >&2; exit 1; }

shopt -s nullglob
modules=()
if [ $# -gt 0 ]; then  # `build_jvm.sh rest-server`: only the named modules
  for module in "$@"; do
    [ -d "jvm/$module/src/main/java" ] || die "no module jvm/$module/src/main/java"
    modules+=("$module")
  done
else
  for dir in jvm/*/; do
    [ -d "${dir}src/main/java" ] && modules+=("$(basename "$dir")")
  done
fi
[ ${#modules[@]} -gt 0 ] || exit 0

# --- javac --------------------------------------------------------------------------------------
find_javac() {
  local c
  for c in "$(command -v javac 2>/dev/null || true)" "${JAVA_HOME:+$JAVA_HOME/bin/javac}" /usr/lib/jvm/*/bin/javac; do
    [ -n "$c" ] && [ -x "$c" ] && { readlink -f "$c"; return 0; }
  done
  return 1
}
if ! JAVAC=$(find_javac); then
  if [ "${CONSISTENT_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "build_jvm: installing openjdk-17-jdk-headless with apt-get (javac)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
    JAVAC=$(find_javac) || die "javac still missing after installing openjdk-17-jdk-headless"
  else
    die "javac not found; install a JDK: sudo apt-get install -y openjdk-17-jdk-headless"
  fi
fi
JAVA=$(dirname "$JAVAC")/java
[ -x "$JAVA" ] || die "no java next to $JAVAC"

# --- classpath ----------------------------------------------------------------------------------
PY=${CONSISTENT_BUILD_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
locations=$("$PY" - <<'PY'
import importlib.util
for name in ("snowpark_connect_deps_iceberg", "pyspark"):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    print(spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else "")
PY
)
JARS_PKG=$(sed -n 1p <<<"$locations")
PYSPARK=$(sed -n 2p <<<"$locations")

if [ -n "${CONSISTENT_ICEBERG_JAR:-}" ]; then
  if [ -d "$CONSISTENT_ICEBERG_JAR" ]; then
    cands=("$CONSISTENT_ICEBERG_JAR"/iceberg-spark-runtime-3.5_2.12-*.jar)
    [ ${#cands[@]} -gt 0 ] || die "\$CONSISTENT_ICEBERG_JAR=$CONSISTENT_ICEBERG_JAR has no iceberg-spark-runtime-3.5_2.12-*.jar"
    ICEBERG_JAR=$(printf '%s\n' "${cands[@]}" | sort | tail -n1)
  else
    [ -f "$CONSISTENT_ICEBERG_JAR" ] || die "\$CONSISTENT_ICEBERG_JAR=$CONSISTENT_ICEBERG_JAR does not exist"
    ICEBERG_JAR=$CONSISTENT_ICEBERG_JAR
  fi
else
  [ -n "$JARS_PKG" ] || die "snowpark_connect_deps_iceberg is not installed (run scripts/setup.sh) and \$CONSISTENT_ICEBERG_JAR is unset"
  cands=("$JARS_PKG"/jars/iceberg-spark-runtime-3.5_2.12-*.jar)
  [ ${#cands[@]} -gt 0 ] || die "no iceberg-spark-runtime-3.5_2.12-*.jar in $JARS_PKG/jars"
  ICEBERG_JAR=$(printf '%s\n' "${cands[@]}" | sort | tail -n1)
fi
ICEBERG_JAR=$(readlink -f "$ICEBERG_JAR")
if [ -n "${CONSISTENT_SPARK_JARS:-}" ]; then
  SPARK_JARS=$CONSISTENT_SPARK_JARS
  [ -d "$SPARK_JARS" ] || die "\$CONSISTENT_SPARK_JARS=$SPARK_JARS is not a directory (want Spark's jars, e.g. .../site-packages/pyspark/jars)"
else
  [ -n "$PYSPARK" ] && [ -d "$PYSPARK/jars" ] || die "pyspark's jars not found (run scripts/setup.sh, or set \$CONSISTENT_SPARK_JARS)"
  SPARK_JARS=$PYSPARK/jars
fi
SPARK_JARS=$(readlink -f "$SPARK_JARS")
spark_core=("$SPARK_JARS"/spark-core_*.jar)
[ ${#spark_core[@]} -gt 0 ] || die "no spark-core_*.jar in $SPARK_JARS: not Spark's jars directory"

# The versions the jars are compiled against, for their manifests: spark-core_2.12-3.5.9.jar and
# iceberg-spark-runtime-3.5_2.12-1.10.2.jar carry them in their names.
core_name=$(basename "${spark_core[0]}" .jar)          # spark-core_2.12-3.5.9
SCALA_VERSION=${core_name#spark-core_}; SCALA_VERSION=${SCALA_VERSION%%-*}
SPARK_VERSION=${core_name##*-}
ICEBERG_VERSION=$(basename "$ICEBERG_JAR" .jar); ICEBERG_VERSION=${ICEBERG_VERSION##*-}
PROJECT_VERSION=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' pyproject.toml | head -n1)
# Bytecode for Java 17 whatever JDK compiles it (a JDK 21 would otherwise emit classes Java 17 cannot load).
JAVA_RELEASE=17
JAVAC_FLAGS=(-nowarn -Xlint:none -proc:none -encoding UTF-8 --release "$JAVA_RELEASE")

cp_entries=("$ICEBERG_JAR" "$SPARK_JARS/*")
if [ -n "${CONSISTENT_JDBC_JARS+set}" ]; then
  IFS=: read -r -a jdbc <<<"$CONSISTENT_JDBC_JARS"
  for jar in "${jdbc[@]}"; do [ -n "$jar" ] && cp_entries+=("$jar"); done
else
  for jar in /usr/share/java/sqlite-jdbc.jar /usr/share/java/postgresql.jar; do
    [ -f "$jar" ] && cp_entries+=("$jar")
  done
fi
CLASSPATH_RT=$(IFS=:; echo "${cp_entries[*]}")

# --- build ----------------------------------------------------------------------------------------
mkdir -p "$BUILD"
if command -v flock >/dev/null 2>&1; then  # two test sessions building at once
  exec 9>"$BUILD/.lock"
  flock 9
fi

failed=()
for module in "${modules[@]}"; do
  src=jvm/$module/src/main
  out=$BUILD/$module
  stamp=$out/.built
  want="$JAVAC ${JAVAC_FLAGS[*]}"$'\n'"$CLASSPATH_RT"
  if [ -f "$stamp" ] && [ -d "$out/classes" ] && [ "$(cat "$stamp")" = "$want" ] \
     && [ -z "$(find "$src" -newer "$stamp" -print -quit)" ]; then
    continue  # up to date
  fi
  mapfile -t sources < <(find "$src/java" -name '*.java' | sort)
  [ ${#sources[@]} -gt 0 ] || continue
  tmp=$(mktemp -d "$BUILD/.$module.XXXXXX")
  chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  if ! "$JAVAC" "${JAVAC_FLAGS[@]}" \
        -cp "$CLASSPATH_RT" -d "$tmp/classes" "${sources[@]}" >"$tmp/javac.log" 2>&1; then
    cat "$tmp/javac.log" >&2
    echo "build_jvm: javac failed for $module (its previous build, if any, is left as it was)" >&2
    rm -rf "$tmp"
    trap - EXIT
    failed+=("$module")
    continue  # one broken module does not block the others
  fi
  [ -d "$src/resources" ] && cp -R "$src/resources/." "$tmp/classes/"
  printf '%s\n' "$CLASSPATH_RT" >"$tmp/classpath"
  printf '%s\n' "$JAVA" >"$tmp/java"
  rm -f "$tmp/javac.log"
  rm -rf "$out"
  rm -f "$BUILD/$module-tests.jar"  # compiled against the classes just replaced
  mv "$tmp" "$out"
  trap - EXIT
  printf '%s' "$want" >"$stamp"
  echo "build_jvm: compiled $module (${#sources[@]} sources) into $out/classes"
done
# Test classes: rebuilt when a file under src/test is newer than their last build, the module's classes
# were rebuilt since, their jar is missing, or the classpath, javac or its flags changed.
if [ "${CONSISTENT_JVM_TESTS:-1}" != 0 ]; then
  for module in "${modules[@]}"; do
    src=jvm/$module/src/test
    out=$BUILD/$module
    stamp=$out/.built-tests
    jar=$BUILD/$module-tests.jar
    [ -d "$src/java" ] && [ -f "$out/.built" ] && [ -d "$out/classes" ] || continue
    [[ " ${failed[*]-} " == *" $module "* ]] && continue  # its classes did not compile
    want="$JAVAC ${JAVAC_FLAGS[*]}"$'\n'"$CLASSPATH_RT"
    if [ -f "$stamp" ] && [ -d "$out/test-classes" ] && [ -f "$jar" ] && [ "$(cat "$stamp")" = "$want" ] \
       && [ ! "$out/.built" -nt "$stamp" ] && [ -z "$(find "$src" -newer "$stamp" -print -quit)" ]; then
      continue  # up to date
    fi
    mapfile -t sources < <(find "$src/java" -name '*.java' | sort)
    [ ${#sources[@]} -gt 0 ] || continue
    tmp=$(mktemp -d "$BUILD/.$module-tests.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    if ! "$JAVAC" "${JAVAC_FLAGS[@]}" \
          -cp "$out/classes:$CLASSPATH_RT" -d "$tmp/test-classes" "${sources[@]}" >"$tmp/javac.log" 2>&1 \
       || ! { [ ! -d "$src/resources" ] || cp -R "$src/resources/." "$tmp/test-classes/"; } \
       || ! "$(dirname "$JAVAC")/jar" cf "$tmp/tests.jar" -C "$tmp/test-classes" . >>"$tmp/javac.log" 2>&1; then
      cat "$tmp/javac.log" >&2
      echo "build_jvm: building $module's tests (jvm/$module/src/test) failed; its classes and jar are built" >&2
      rm -rf "$tmp"
      trap - EXIT
      failed+=("$module-tests")
      continue
    fi
    rm -rf "$out/test-classes" "$stamp"
    mv "$tmp/test-classes" "$out/test-classes"
    mv "$tmp/tests.jar" "$jar"
    rm -rf "$tmp"
    trap - EXIT
    printf '%s' "$want" >"$stamp"
    echo "build_jvm: compiled $module's tests (${#sources[@]} sources) into $out/test-classes and $jar"
  done
fi
# A jar per module (spark.jars takes jars, and the Spark plugin must load beside the Iceberg runtime jar).
# Its manifest says what it is and what it was compiled against; a changed manifest re-packs the jar.
JAR_TOOL=$(dirname "$JAVAC")/jar
for module in "${modules[@]}"; do
  out=$BUILD/$module
  [ -f "$out/.built" ] && [ -d "$out/classes" ] || continue
  manifest="Implementation-Title: consistent-catalog $module
Implementation-Version: $PROJECT_VERSION
Implementation-Vendor: consistent-catalog
Spark-Version: $SPARK_VERSION
Scala-Version: $SCALA_VERSION
Iceberg-Version: $ICEBERG_VERSION
Build-Jdk-Spec: $JAVA_RELEASE
"
  if [ ! -f "$BUILD/$module.jar" ] || [ "$out/.built" -nt "$BUILD/$module.jar" ] \
     || [ "$(cat "$BUILD/$module.manifest" 2>/dev/null)" != "$(printf '%s' "$manifest")" ]; then
    printf '%s' "$manifest" >"$BUILD/$module.manifest.tmp"
    "$JAR_TOOL" cfm "$BUILD/$module.jar.tmp" "$BUILD/$module.manifest.tmp" -C "$out/classes" . \
      && mv "$BUILD/$module.jar.tmp" "$BUILD/$module.jar" && mv "$BUILD/$module.manifest.tmp" "$BUILD/$module.manifest"
  fi
done
[ ${#failed[@]} -eq 0 ] || die "failed: ${failed[*]}"
