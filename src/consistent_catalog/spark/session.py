"""A SparkSession sharing one Iceberg catalog with pyiceberg (Spark's JdbcCatalog and pyiceberg's SqlCatalog share one schema).

Spark's Iceberg ``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` read and write the same ``iceberg_tables``
rows, so both engines see one set of tables in one SQLite file (embedded default) or one PostgreSQL
database. The two must use the **same catalog name** (it is the ``catalog_name`` column): the Spark
catalog ``spark.sql.catalog.lake`` and ``SqlCatalog("lake", ...)``.

Traps this module handles (each verified on Spark 3.5 / Iceberg 1.10; spark-conf/README.md):

- SQLite lock: when Spark's JdbcCatalog initialises the catalog tables itself it keeps a read lock for
  the JVM's life and every pyiceberg commit fails with ``database is locked``. So Spark runs with
  ``jdbc.init-catalog-tables=false`` and pyiceberg creates the database first (``ensure_sql_catalog``).
- Spark's table cache hides other writers' commits for 30 s: ``cache-enabled=false``.
- Jars by Maven coordinates: the Iceberg runtime of the installed pyspark's line (``lines.current_line``)
  and the JDBC driver go into ``spark.jars.packages`` (Spark resolves and caches them), unless local jars
  are found: ``$CONSISTENT_ICEBERG_JAR`` / ``$CONSISTENT_JDBC_JARS`` (the offline form for air-gapped
  clusters), or a checkout's ``build/jvm/spark-<line>/lib`` (``make setup`` copies them there from Maven).

An Iceberg REST catalog works too: give its URI (``http://host:8181``, ``https://...``) instead of a
SQL one. Spark then uses ``type=rest`` and pyiceberg a ``RestCatalog`` on the same server; both send
their ``warehouse`` to the server's ``GET /v1/config`` (a name or a location, whatever the server
expects; omitted when None), no JDBC driver is needed, and there is no SQLite lock to avoid.

Also a command that renders ``spark-conf/spark-defaults.conf`` for stock ``spark-sql``::

    consistent-catalog spark-conf --write spark-conf/spark-defaults.conf
    spark-sql --properties-file spark-conf/spark-defaults.conf -e 'SHOW NAMESPACES IN lake'

and, for a PySpark builder of your own, ``configure_spark(SparkSession.builder, catalog_uri, warehouse)``.
The consistent catalog's plugin jar of each supported Spark line ships inside the wheel
(``consistent_catalog/jars/lake-consistent-spark-<line>_<scala>.jar``, built with Maven by
``build_support/plugin_jar.py`` when the wheel is built); ``find_plugin_jar`` picks the installed pyspark's.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from consistent_catalog.exceptions import CatalogConfigError
from consistent_catalog.spark.lines import DEFAULT_LINE, SPARK_LINES, SparkLine, current_line

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

ICEBERG_VERSION = SPARK_LINES[DEFAULT_LINE].iceberg
ICEBERG_RUNTIME_PACKAGE = SPARK_LINES[DEFAULT_LINE].iceberg_runtime_package
"""The default line's runtime coordinates; ``current_line().iceberg_runtime_package`` is the installed pyspark's."""

ICEBERG_JAR_ENV = "CONSISTENT_ICEBERG_JAR"
JDBC_JARS_ENV = "CONSISTENT_JDBC_JARS"
# Maven coordinates of the JDBC drivers (the versions jvm/pom.xml builds and tests with).
JDBC_DRIVER_PACKAGES = {"sqlite": "org.xerial:sqlite-jdbc:3.54.1.0", "postgresql": "org.postgresql:postgresql:42.7.14"}

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
PLUGIN_CLASS = "io.consistentcatalog.spark.ConsistentSparkCatalog"
"""The consistent catalog (jvm/spark-plugin): every table served at one consistent cut."""
PLUGIN_EXTENSIONS = "io.consistentcatalog.spark.ConsistentSqlExtensions"
"""Parses ``CALL <catalog>.system.refresh_cut()`` / ``current_cut(...)`` (Iceberg's parser takes only its own)."""
PACKAGE_JARS = Path(__file__).resolve().parents[1] / "jars"
"""The plugin jars inside an installed wheel, one per line (build_support/plugin_jar.py builds them into the wheel)."""
PLUGIN_JAR_ENV = "CONSISTENT_PLUGIN_JAR"
#: Comma-separated settings a builder may already hold: configure_spark adds to them instead of replacing them.
_LIST_KEYS = ("spark.jars", "spark.jars.packages", "spark.sql.extensions")
#: Settings of the plain catalog the consistent catalog shares: the same catalog database and warehouse.
_SHARED_KEYS = (
    "type", "uri", "warehouse", "jdbc.init-catalog-tables", "cache-enabled", "jdbc.user", "jdbc.password", "io-impl",
    "glue.id", "glue.endpoint", "client.region",
)

# A laptop / CI runner with 2 cores: no UI, few shuffle partitions, a modest driver heap.
SMALL_MACHINE_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
}

DEMO_CATALOG = ".demo/catalog.db"
DEMO_WAREHOUSE = ".demo/warehouse"
TEMPLATE_RELPATH = "spark-conf/spark-defaults.conf.template"


# --- jars -----------------------------------------------------------------------------------------
def package_plugin_jar(line: SparkLine | None = None) -> Path:
    """Where the wheel keeps the plugin jar of ``line`` (default: the installed pyspark's)."""
    return PACKAGE_JARS / f"{(line or current_line()).plugin_artifact}.jar"


def checkout_line_dir(line: SparkLine | None = None) -> Path:
    """The checkout's Maven build folder of ``line`` (``build/jvm/spark-3.5``): its jar, ``lib/``, ``classpath``."""
    return repo_root() / (line or current_line()).build_folder


def find_plugin_jar() -> str | None:
    """The consistent catalog's jar for the installed pyspark's line, or None (``missing_plugin_jar_message``
    then says why).

    ``$CONSISTENT_PLUGIN_JAR`` when set (a path that is no file means none: the way to render a file without
    the consistent catalog); else the line's jar inside the installed package (``package_plugin_jar``); else
    the one a checkout's Maven build wrote (``build/jvm/spark-<line>/lake-consistent-spark-<line>_<scala>-*.jar``;
    an editable install keeps no jar in ``src/``; ``make setup`` builds it there).
    """
    configured = os.environ.get(PLUGIN_JAR_ENV)
    if configured:
        path = Path(configured).expanduser()
        return str(path.resolve()) if path.is_file() else None
    line = current_line()
    packaged = package_plugin_jar(line)
    if packaged.is_file():
        return str(packaged)
    built = [p for p in checkout_line_dir(line).glob(f"{line.plugin_artifact}-*.jar") if not p.name.endswith("-tests.jar")]
    return _newest(built)


def missing_plugin_jar_message() -> str:
    """One line: why ``find_plugin_jar`` found no jar, and the way out (spark-conf's note, configure_spark's error)."""
    configured = os.environ.get(PLUGIN_JAR_ENV)
    if configured:
        return (f"${PLUGIN_JAR_ENV}={configured} is not a file: point it at a lake-consistent-spark-*.jar, or unset it "
                "to use the one inside the package")
    line = current_line()
    root = repo_root()
    if (root / "jvm" / "pom.xml").is_file():
        return (f"the checkout {root} has no {line.build_folder}/{line.plugin_artifact}-*.jar: build it with "
                "bash scripts/build_jvm.sh (make setup does)")
    return (f"the package at {PACKAGE_JARS.parent} has no jars/{line.plugin_artifact}.jar (built without a JDK "
            "and Maven): install a wheel built with them (make dist in a checkout), or set "
            f"{PLUGIN_JAR_ENV}=/path/to/{line.plugin_artifact}.jar")


def find_iceberg_runtime_jar() -> str | None:
    """A local Iceberg Spark runtime jar of the installed pyspark's line, or None (then ``spark_conf`` asks for
    it by coordinates, ``spark.jars.packages``).

    ``$CONSISTENT_ICEBERG_JAR`` (a jar, or a directory holding one: the offline form), else the checkout's
    ``build/jvm/spark-<line>/lib`` (copied there from Maven by ``make setup``). A set but wrong variable is an error.
    """
    line = current_line()
    pattern = f"{line.iceberg_runtime_artifact}-*.jar"
    explicit = os.environ.get(ICEBERG_JAR_ENV, "").strip()
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_dir():
            found = _newest(path.glob(pattern))
            if found is None:
                raise CatalogConfigError(f"${ICEBERG_JAR_ENV}={explicit} is a directory without {pattern}")
            return found
        if not path.is_file():
            raise CatalogConfigError(
                f"${ICEBERG_JAR_ENV}={explicit} does not exist; point it at {line.iceberg_runtime_artifact}-"
                f"{line.iceberg}.jar or unset it"
            )
        return str(path.resolve())
    return _newest((checkout_line_dir(line) / "lib").glob(pattern))


def find_aws_bundle_jar() -> str | None:
    """The checkout's ``iceberg-aws-bundle`` jar of the installed pyspark's line (the AWS SDK v2 that Iceberg's
    ``GlueCatalog`` calls; ``make setup`` copies it from Maven into ``build/jvm/spark-<line>/lib/glue``), or None
    (then ``spark_conf`` asks for it by coordinates)."""
    return _newest((checkout_line_dir() / "lib" / "glue").glob("iceberg-aws-bundle-*.jar"))


def _newest(paths: Iterable[Path]) -> str | None:
    candidates = sorted(paths)  # several versions side by side: take the highest name
    return str(candidates[-1].resolve()) if candidates else None


def find_jdbc_jars() -> list[str]:
    """Local JDBC driver jars to put on Spark's classpath (a driver not found here goes by coordinates).

    ``$CONSISTENT_JDBC_JARS`` (colon-separated; every entry must exist) replaces the default, the drivers a
    checkout's Maven build copied into ``build/jvm/spark-<line>/lib`` (``sqlite-jdbc-*.jar``, ``postgresql-*.jar``).
    """
    explicit = os.environ.get(JDBC_JARS_ENV)
    if explicit is not None:
        jars = [p.strip() for p in explicit.split(":") if p.strip()]
        missing = [p for p in jars if not Path(p).expanduser().is_file()]
        if missing:
            raise CatalogConfigError(f"${JDBC_JARS_ENV} names missing jar(s): {', '.join(missing)}")
        return [str(Path(p).expanduser().resolve()) for p in jars]
    lib = checkout_line_dir() / "lib"
    return [jar for jar in (_newest(lib.glob("sqlite-jdbc-*.jar")), _newest(lib.glob("postgresql-*.jar"))) if jar]


# --- catalog URIs ---------------------------------------------------------------------------------
def is_rest_uri(catalog_uri: str | os.PathLike[str] | None) -> bool:
    """An Iceberg REST catalog's URI (``http://...``/``https://...``), as opposed to a SQL catalog's."""
    if catalog_uri is None:
        return False
    return bool(re.match(r"^https?://", os.fspath(catalog_uri).strip(), re.IGNORECASE))


GLUE_ARN = re.compile(r"^arn:aws[a-z-]*:glue:(?P<region>[a-z0-9-]+):(?P<account>\d{12})(?:\?endpoint=(?P<endpoint>\S+))?$")


def is_service_uri(catalog_uri: str | os.PathLike[str] | None) -> bool:
    """A catalog served by something other than a SQL database: REST, a Hive Metastore or Glue."""
    return is_rest_uri(catalog_uri) or service_catalog(catalog_uri) is not None


def service_catalog(catalog_uri: str | os.PathLike[str] | None) -> tuple[str, dict[str, str]] | None:
    """A Hive Metastore (``thrift://host:port``) or AWS Glue catalog (``arn:aws:glue:<region>:<account>``, the
    name OpenLineage gives it, with ``?endpoint=<url>`` for a Glue-compatible endpoint such as moto's): its kind
    and pyiceberg's properties for it; None for any other URI."""
    if catalog_uri is None:
        return None
    text = os.fspath(catalog_uri).strip()
    if re.match(r"^thrift://", text, re.IGNORECASE):
        return "hive", {"type": "hive", "uri": text}
    glue = GLUE_ARN.match(text)
    if glue:
        props = {"type": "glue", "glue.id": glue["account"], "glue.region": glue["region"]}
        return "glue", {**props, "glue.endpoint": glue["endpoint"]} if glue["endpoint"] else props
    if text.lower().startswith(("arn:", "glue")):
        raise CatalogConfigError(f"catalog URI {text!r}: name a Glue catalog by its ARN, "
                                 "arn:aws:glue:<region>:<12-digit account>[?endpoint=<url>]")
    return None


def rest_warehouse(warehouse: str | os.PathLike[str] | None) -> str | None:
    """The ``warehouse`` a REST client sends the server: a name (``analytics``) or a URI unchanged, a
    path (``/data/w``, ``./w``, ``~/w``) as ``file:///absolute/path``; None or empty: none."""
    if warehouse is None:
        return None
    text = os.fspath(warehouse).strip()
    if not text:
        return None
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) or not re.match(r"^(/|\.|~|file:)", text):
        return text
    return normalize_warehouse(text)


@dataclass(frozen=True)
class SqlCatalogUri:
    """One SQL catalog database, in both spellings: SQLAlchemy (pyiceberg) and JDBC (Spark)."""

    kind: str  # "sqlite" or "postgresql"
    jdbc_uri: str
    pyiceberg_uri: str
    user: str | None = None
    password: str | None = None
    path: Path | None = None  # the SQLite file


def parse_catalog_uri(catalog_uri: str | os.PathLike[str]) -> SqlCatalogUri:
    """Read a pyiceberg/SQLAlchemy URI, a JDBC URI or a plain SQLite file path.

    >>> parse_catalog_uri("sqlite:////tmp/c/catalog.db").jdbc_uri
    'jdbc:sqlite:/tmp/c/catalog.db'
    >>> parse_catalog_uri("postgresql+psycopg2://me:pw@db:5432/lake").jdbc_uri
    'jdbc:postgresql://db:5432/lake'
    """
    text = os.fspath(catalog_uri).strip()
    lowered = text.lower()
    if lowered.startswith("jdbc:sqlite:"):
        return _sqlite(text[len("jdbc:sqlite:") :].split("?", 1)[0].removeprefix("file:"))
    if lowered.startswith("jdbc:postgresql:"):
        parts = urlsplit(text[len("jdbc:") :])
        host = parts.netloc or "localhost"
        pyiceberg = f"postgresql+psycopg2://{host}{parts.path}" + (f"?{parts.query}" if parts.query else "")
        return SqlCatalogUri("postgresql", text, pyiceberg)
    scheme = lowered.split(":", 1)[0] if "://" in text else ""
    dialect = scheme.split("+", 1)[0]
    if not scheme:
        return _sqlite(text)  # a plain file path
    if dialect == "sqlite":
        rest = text.split("://", 1)[1]
        if not rest.startswith("/") or rest in ("/", "/:memory:"):
            raise CatalogConfigError(
                f"catalog URI {text!r} is not a SQLite file; Spark and pyiceberg can only share a file "
                "(sqlite:////absolute/path/catalog.db)"
            )
        return _sqlite(rest[1:].split("?", 1)[0])
    if dialect in ("postgresql", "postgres"):
        parts = urlsplit(text)
        if not parts.hostname:
            raise CatalogConfigError(f"catalog URI {text!r} names no host; use postgresql+psycopg2://user:pw@host:5432/db")
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = host + (f":{parts.port}" if parts.port else "")
        jdbc = f"jdbc:postgresql://{netloc}{parts.path}" + (f"?{parts.query}" if parts.query else "")
        pyiceberg = text if "+" in scheme else "postgresql+psycopg2" + text[len(scheme) :]
        return SqlCatalogUri(
            "postgresql",
            jdbc,
            pyiceberg,
            unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password else None,
        )
    raise CatalogConfigError(
        f"catalog URI {text!r} is neither SQLite nor PostgreSQL; Spark shares a catalog with pyiceberg through "
        "sqlite:////path/catalog.db or postgresql+psycopg2://user:pw@host:5432/db"
    )


def _sqlite(path: str) -> SqlCatalogUri:
    if not path or path == ":memory:":
        raise CatalogConfigError("an in-memory SQLite catalog cannot be shared with Spark; give a file path")
    absolute = Path(path).expanduser().absolute()
    return SqlCatalogUri("sqlite", f"jdbc:sqlite:{absolute}", f"sqlite:///{absolute}", path=absolute)


def normalize_warehouse(warehouse: str | os.PathLike[str]) -> str:
    """A URI for the warehouse: ``s3://...`` etc. unchanged, a plain path as ``file:///absolute/path``."""
    text = os.fspath(warehouse).strip()
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        return text.rstrip("/") if text.split("://", 1)[1].strip("/") else text
    if text.startswith("file:"):
        text = text[len("file:") :]
    return "file://" + str(Path(text).expanduser().absolute()).rstrip("/")


# --- Spark configuration --------------------------------------------------------------------------
def spark_conf(
    catalog_uri: str | os.PathLike[str],
    warehouse: str | os.PathLike[str] | None,
    *,
    name: str = "lake",
    consistent: bool = True,
) -> dict[str, str]:
    """The Spark settings for an Iceberg catalog ``name`` shared with pyiceberg's ``SqlCatalog(name, ...)``.

    With ``consistent`` and the plugin jar built (``find_plugin_jar``), also the consistent catalog
    ``<name>_consistent`` over the same catalog database: every table it loads is served at one
    consistent cut (README, "Spark SQL reads consistent cuts").

    ``catalog_uri`` is pyiceberg's (``sqlite:////abs/catalog.db``, ``postgresql+psycopg2://u:p@h:5432/db``),
    a JDBC URI or a SQLite file path. Jars come from ``find_iceberg_runtime_jar``/``find_jdbc_jars``; what
    is missing locally is requested from Maven with ``spark.jars.packages``.

    ``catalog_uri`` may also be an Iceberg REST catalog (``http(s)://host:port[/path]``): then the
    catalog is ``type=rest`` on that URI, ``warehouse`` is what the client sends the server
    (``rest_warehouse``; None: none), and no JDBC driver jar is added.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise CatalogConfigError(f"catalog name {name!r} is not a valid Spark catalog name (letters, digits, _)")
    prefix = f"spark.sql.catalog.{name}"
    rest = is_rest_uri(catalog_uri)
    service = service_catalog(catalog_uri)
    target = None if rest or service is not None else parse_catalog_uri(catalog_uri)
    conf = {
        "spark.sql.extensions": EXTENSIONS,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.cache-enabled": "false",
    }
    packages: list[str] = []
    jars: list[str] = []
    if service is not None:
        conf.update({f"{prefix}.{key}": value for key, value in _spark_service_settings(*service, warehouse).items()})
        if service[0] == "glue":  # Iceberg's GlueCatalog (in the runtime) calls the AWS SDK v2 (docs/catalogs.md)
            bundle = find_aws_bundle_jar()
            if bundle is None:
                packages.append(f"org.apache.iceberg:iceberg-aws-bundle:{current_line().iceberg}")
            else:
                jars.append(bundle)
    elif target is None:
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = os.fspath(catalog_uri).strip().rstrip("/")
        location = rest_warehouse(warehouse)
        if location is not None:
            conf[f"{prefix}.warehouse"] = location
    else:
        if warehouse is None:
            raise CatalogConfigError("a SQL catalog needs a warehouse (a path or a URI such as s3://bucket/warehouse)")
        conf[f"{prefix}.type"] = "jdbc"
        conf[f"{prefix}.uri"] = target.jdbc_uri
        conf[f"{prefix}.warehouse"] = normalize_warehouse(warehouse)
        # SQLite: pyiceberg creates the tables first; Spark creating them would lock the file for the
        # JVM's life. PostgreSQL has no such problem, so Spark may create them there.
        conf[f"{prefix}.jdbc.init-catalog-tables"] = "false" if target.kind == "sqlite" else "true"
        if target.user is not None:
            conf[f"{prefix}.jdbc.user"] = target.user
        if target.password is not None:
            conf[f"{prefix}.jdbc.password"] = target.password

    runtime = find_iceberg_runtime_jar()
    if runtime is None:
        packages.append(current_line().iceberg_runtime_package)
    else:
        jars.append(runtime)
    if target is not None:  # a REST catalog needs no JDBC driver in Spark (the server has its own)
        jdbc_jars = find_jdbc_jars()
        jars.extend(jdbc_jars)
        if not any(target.kind in Path(j).name.lower() for j in jdbc_jars):
            packages.append(JDBC_DRIVER_PACKAGES[target.kind])
    plugin = find_plugin_jar() if consistent else None
    if plugin is not None:  # the consistent catalog over the same catalog database (README: Spark)
        target_prefix = f"spark.sql.catalog.{name}_consistent"
        conf[target_prefix] = PLUGIN_CLASS
        conf.update({f"{target_prefix}.{key}": conf[f"{prefix}.{key}"] for key in _SHARED_KEYS if f"{prefix}.{key}" in conf})
        conf[f"{target_prefix}.plain-catalog"] = name
        conf["spark.sql.extensions"] = f"{EXTENSIONS},{PLUGIN_EXTENSIONS}"
        jars.append(plugin)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    return conf


def _spark_service_settings(kind: str, props: Mapping[str, str], warehouse: str | os.PathLike[str] | None
                            ) -> dict[str, str]:
    """Iceberg's Spark settings (without the ``spark.sql.catalog.<name>.`` prefix) for a Hive Metastore or Glue.

    Hive: ``type=hive`` and the Thrift ``uri`` (Iceberg's ``HiveCatalog`` uses the Hive client classes pyspark
    ships). Glue: ``type=glue``, ``glue.id`` (the account's Data Catalog), ``client.region``, ``glue.endpoint`` when
    given; a local (``file://``) warehouse with Hadoop's FileIO (Iceberg's Glue default is ``S3FileIO``).
    """
    if kind == "hive":
        conf = {"type": "hive", "uri": props["uri"]}
    else:
        if warehouse is None:
            raise CatalogConfigError("a Glue catalog needs --warehouse (where new tables go: s3://bucket/warehouse)")
        conf = {"type": "glue", "glue.id": props["glue.id"], "client.region": props["glue.region"]}
        if "glue.endpoint" in props:
            conf["glue.endpoint"] = props["glue.endpoint"]
    if warehouse is not None:
        conf["warehouse"] = normalize_warehouse(warehouse)
        if kind == "glue" and conf["warehouse"].startswith("file:"):
            conf["io-impl"] = "org.apache.iceberg.hadoop.HadoopFileIO"
    return conf


def ensure_sql_catalog(
    catalog_uri: str | os.PathLike[str], warehouse: str | os.PathLike[str], *, name: str = "lake"
) -> SqlCatalog | None:
    """Create a SQLite catalog database with pyiceberg before Spark opens it (the SQLite-lock trap).

    Returns the ``SqlCatalog`` for SQLite (its connection pool already disposed) and None for
    PostgreSQL, where Spark may create the catalog tables itself, and for a REST catalog (its server
    owns the catalog database).
    """
    if is_service_uri(catalog_uri):
        return None
    target = parse_catalog_uri(catalog_uri)
    if target.kind != "sqlite":
        return None
    from pyiceberg.catalog.sql import SqlCatalog

    assert target.path is not None
    target.path.parent.mkdir(parents=True, exist_ok=True)
    location = normalize_warehouse(warehouse)
    if location.startswith("file://"):
        Path(location[len("file://") :]).mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(name, uri=target.pyiceberg_uri, warehouse=location)
    catalog.engine.dispose()  # hold no connection to the file while Spark starts
    return catalog


def configure_spark(
    builder: SparkSession.Builder,
    catalog_uri: str | os.PathLike[str],
    warehouse: str | os.PathLike[str] | None,
    *,
    name: str = "lake",
    consistent: bool = True,
) -> SparkSession.Builder:
    """Add the catalogs and their jars to your own PySpark builder, the way delta's
    ``configure_spark_with_delta_pip(builder)`` does; returns the builder::

        builder = SparkSession.builder.appName("report").master("local[2]")
        spark = configure_spark(builder, "sqlite:////abs/catalog.db", "/abs/warehouse").getOrCreate()
        spark.table("lake_consistent.demo.words")

    Sets the plain Iceberg catalog ``name`` and the consistent catalog ``<name>_consistent`` (``spark_conf``'s
    settings), and adds the Iceberg runtime jar, the JDBC driver and the plugin jar inside the package to
    ``spark.jars`` (what is not found locally to ``spark.jars.packages``). ``spark.jars``,
    ``spark.jars.packages`` and ``spark.sql.extensions`` the builder already holds are kept, ours appended.
    A SQLite catalog database is created with pyiceberg first (Spark must not create it: the SQLite-lock
    trap), and ``PYSPARK_PYTHON`` is set to this interpreter when unset.

    ``consistent=False`` configures the plain catalog only; with ``consistent=True`` a missing plugin jar is a
    ``CatalogConfigError`` naming the way out. Jars and extensions reach only a session this builder creates:
    ``getOrCreate()`` returns a running session unchanged, so stop that one first.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ImportError(
            "pyspark is not installed; install the Spark extra: pip install 'consistent-catalog[spark]'"
        ) from None
    from consistent_catalog.spark import _jvm

    if not isinstance(builder, SparkSession.Builder):
        raise TypeError(f"configure_spark takes a SparkSession.Builder (SparkSession.builder), not {type(builder).__name__}")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise CatalogConfigError(
            "Spark needs Java 17 and none was found; install it (apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    if consistent and find_plugin_jar() is None:
        raise CatalogConfigError(
            f"no Spark plugin jar for the consistent catalog {name}_consistent: {missing_plugin_jar_message()}; "
            "or pass consistent=False for the plain catalog only"
        )
    conf = spark_conf(catalog_uri, warehouse, name=name, consistent=consistent)
    ensure_sql_catalog(catalog_uri, warehouse, name=name)
    # Python workers (createDataFrame, UDFs) run PYSPARK_PYTHON, by default "python3" from PATH, which
    # outside an activated venv is another interpreter; use this one unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    held = _jvm.builder_options(builder)
    for key, value in conf.items():
        if key in _LIST_KEYS and held.get(key):
            theirs = [item for item in held[key].split(",") if item]
            value = ",".join([*theirs, *(item for item in value.split(",") if item not in theirs)])
        builder = builder.config(key, value)
    return builder


def build_session(
    catalog_uri: str | os.PathLike[str],
    warehouse: str | os.PathLike[str] | None,
    *,
    name: str = "lake",
    app_name: str = "consistent-catalog",
    master: str = "local[2]",
    extra_conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """A SparkSession with the Iceberg catalog ``name`` (``spark.table(f"{name}.demo.words")``) and, where the
    plugin jar is found, the consistent catalog ``<name>_consistent``.

    ``configure_spark`` on a builder with the small-machine settings (``SMALL_MACHINE_CONF``): it creates a
    SQLite catalog with pyiceberg first and sets ``PYSPARK_PYTHON`` to this interpreter when it
    is unset. ``extra_conf`` overrides any setting. If a session is
    already running in this process, Spark returns it and static settings (jars, extensions) are
    not applied to it: stop it first.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ImportError(
            "pyspark is not installed; install the Spark extra: pip install 'consistent-catalog[spark]'"
        ) from None
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in SMALL_MACHINE_CONF.items():
        builder = builder.config(key, value)
    # The consistent catalog where its jar is found, else the plain catalog alone (spark-conf says which).
    builder = configure_spark(builder, catalog_uri, warehouse, name=name, consistent=find_plugin_jar() is not None)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


# --- spark-defaults.conf --------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")

def builtin_template() -> str:
    """The template shipped inside the package (the checkout's ``spark-conf/spark-defaults.conf.template``
    links to it): what a pip-installed package renders outside a checkout."""
    from importlib.resources import files

    return files("consistent_catalog.spark").joinpath("spark-defaults.conf.template").read_text(encoding="utf-8")


def _escape(value: str) -> str:
    # spark-defaults.conf is a java.util.Properties file: backslashes are escapes.
    return value.replace("\\", "\\\\")


def parse_spark_defaults(text: str) -> dict[str, str]:
    """Parse a spark-defaults.conf (``key  value`` lines, ``#`` comments) the way Spark reads it."""
    conf: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"^(\S+?)(?:\s*[=:]\s*|\s+)(.*)$", line)
        key, value = (match.group(1), match.group(2)) if match else (line, "")
        conf[key] = value.strip().replace("\\\\", "\\")
    return conf


def render_spark_defaults(
    template: str,
    catalog_uri: str | os.PathLike[str],
    warehouse: str | os.PathLike[str],
    *,
    name: str = "lake",
) -> str:
    """Fill ``{{placeholder}}`` lines of a spark-defaults template with real paths and settings.

    Placeholders: ``catalog``, ``jdbc_uri``, ``warehouse``, ``init_catalog_tables``, ``jdbc_user``,
    ``jdbc_password``, ``spark_jars``, ``spark_jars_packages``, ``sql_extensions``, ``consistent_catalog``,
    ``plugin_class``. A setting line whose placeholders are all empty (e.g. ``jdbc.user`` for SQLite,
    ``spark.jars.packages`` when the jars are local, the consistent catalog without its jar) is left out;
    a line naming ``consistent_catalog`` is left out whenever that one is empty.
    Any setting of ``spark_conf`` the template lacks is appended, so the file is never incomplete.
    """
    conf = spark_conf(catalog_uri, warehouse, name=name)
    prefix = f"spark.sql.catalog.{name}"
    values = {
        "catalog": name,
        "jdbc_uri": conf.get(f"{prefix}.uri", ""),
        "warehouse": conf.get(f"{prefix}.warehouse", ""),
        "init_catalog_tables": conf.get(f"{prefix}.jdbc.init-catalog-tables", ""),
        "jdbc_user": conf.get(f"{prefix}.jdbc.user", ""),
        "jdbc_password": conf.get(f"{prefix}.jdbc.password", ""),
        "spark_jars": conf.get("spark.jars", ""),
        "spark_jars_packages": conf.get("spark.jars.packages", ""),
        "sql_extensions": conf["spark.sql.extensions"],
        "consistent_catalog": f"{name}_consistent" if f"{prefix}_consistent" in conf else "",
        "plugin_class": conf.get(f"{prefix}_consistent", ""),
    }
    out: list[str] = []
    for line in template.splitlines():
        names = _PLACEHOLDER.findall(line)
        if line.lstrip().startswith("#"):  # comments: fill known placeholders, keep the rest as written
            out.append(_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), line))
            continue
        unknown = sorted(set(names) - values.keys())
        if unknown:
            raise CatalogConfigError(f"unknown placeholder(s) {unknown} in spark-defaults template line: {line!r}")
        if "consistent_catalog" in names and not values["consistent_catalog"]:
            continue
        value_names = [n for n in names if n not in ("catalog", "consistent_catalog")]
        if value_names and not any(values[n] for n in value_names):
            continue
        out.append(_PLACEHOLDER.sub(lambda m: _escape(values[m.group(1)]), line))
    if conf[f"{prefix}.type"] != "jdbc":
        out = _fit_catalog_lines(out, conf, name)
    rendered = parse_spark_defaults("\n".join(out))
    missing = {k: v for k, v in conf.items() if k not in rendered}
    if missing:
        out.append("")
        out.append("# Settings the template lacked, added by consistent_catalog.spark.session")
        out.extend(f"{key} {_escape(value)}" for key, value in missing.items())
    return "\n".join(out) + "\n"


def _fit_catalog_lines(lines: list[str], conf: Mapping[str, str], name: str) -> list[str]:
    """A REST catalog rendered from a JDBC-shaped template: the template's settings of the catalogs
    ``name`` and ``name_consistent`` take ``conf``'s values (``type rest``), and those ``conf`` has no
    place for (``jdbc.*``) are left out. Other lines are kept as written."""
    catalogs = (f"spark.sql.catalog.{name}", f"spark.sql.catalog.{name}_consistent")
    kept: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            kept.append(line)
            continue
        ((key, value),) = parse_spark_defaults(stripped).items()
        if not any(key == c or key.startswith(c + ".") for c in catalogs):
            kept.append(line)
        elif key in conf:
            spaced = re.match(r"^(\s*\S+?(?:\s*[=:]\s*|\s+))", line)  # keep the line's alignment
            kept.append(line if conf[key] == value else f"{spaced.group(1) if spaced else key + ' '}{_escape(conf[key])}")
        elif key.split(".")[-1] == "plain-catalog" or not key.startswith(tuple(f"{c}.jdbc." for c in catalogs)):
            kept.append(line)  # a setting the user added (io-impl, credentials...): theirs to keep
    return kept


def repo_root(start: Path | None = None) -> Path:
    """The project checkout: the nearest directory (from ``start``/cwd up) with the spark-conf template."""
    here = (start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        if (directory / TEMPLATE_RELPATH).is_file():
            return directory
    source_checkout = Path(__file__).resolve().parents[3]
    if (source_checkout / TEMPLATE_RELPATH).is_file():
        return source_checkout
    return here


def write_spark_defaults(
    path: str | os.PathLike[str],
    catalog_uri: str | os.PathLike[str] | None = None,
    warehouse: str | os.PathLike[str] | None = None,
    *,
    name: str = "lake",
    template: str | os.PathLike[str] | None = None,
    init_catalog: bool = True,
) -> Path:
    """Render the template to ``path`` (defaults: ``<repo>/.demo/catalog.db``, ``<repo>/.demo/warehouse``).

    With ``init_catalog`` a SQLite catalog database is created with pyiceberg, so that
    ``spark-sql --properties-file <path>`` works at once (Spark does not create it; see the lock trap).
    """
    root = repo_root()
    if catalog_uri is None:
        catalog_uri = f"sqlite:///{(root / DEMO_CATALOG).absolute()}"
    if warehouse is None:
        warehouse = root / DEMO_WAREHOUSE
    template_path = Path(template) if template is not None else root / TEMPLATE_RELPATH
    if template_path.is_file():
        text = template_path.read_text(encoding="utf-8")
    elif template is not None:
        raise CatalogConfigError(f"spark-defaults template {template_path} does not exist")
    else:
        text = builtin_template()
    rendered = render_spark_defaults(text, catalog_uri, warehouse, name=name)
    if init_catalog:
        ensure_sql_catalog(catalog_uri, warehouse, name=name)  # nothing to create for a REST catalog
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(rendered, encoding="utf-8")
    if not is_service_uri(catalog_uri) and parse_catalog_uri(catalog_uri).password is not None:
        target.chmod(0o600)  # it holds the catalog database password
    return target
