"""Shared fixtures (a real pyiceberg catalog per test, the FLIP-276 tables, session servers) and tiers.

Tiers follow the directories: ``unit/`` (pure), ``catalog/`` (real SQLite catalogs), ``cli/`` (the
installed command) run in ``make test-fast``; every test under ``integration/``, ``spark/`` and
``notebooks/`` is marked ``integration``, ``spark`` and ``notebook`` here (see
``pytest_collection_modifyitems``); ``docs/`` (the README's and docs' code blocks, run as processes)
and ``conformance/`` (the Python and the JVM resolver over one corpus) count as ``integration``.
Long-running tests carry ``slow`` themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from tests.harness.fault_proxy import FaultProxy
from tests.harness.jvm_cds import SMALL_JVM, SmallDrivers
from tests.harness.lake import COUNTS_SCHEMA, HIST_SCHEMA, WORDS_SCHEMA, sqlite_catalog, words
from tests.harness.rest_server import RestCatalogServer
from tests.harness.servers import MotoS3Server, PostgresServer, postgres_sql_catalog
from tests.harness.wheel import Dists, ProductVenv, Venv, build_dists

TESTS = Path(__file__).resolve().parent
DIRECTORY_MARKS = {
    "integration": "integration",
    "spark": "spark",
    "notebooks": "notebook",
    "docs": "integration",
    "conformance": "integration",
}
"""First directory under tests/ -> the marker every test in it gets."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a test that counts requests (or reads through cc's own catalog) means nothing through the fault proxy
    faulted = [i for i in items if i.get_closest_marker("no_faults") and "[rest-faults" in i.nodeid]
    # a test whose subject no backend changes runs on the backends it names (CI time), not on all four
    faulted += [i for i in items if (m := i.get_closest_marker("backends")) and i.callspec.params.get("backend")
                not in m.args]
    if faulted:
        config.hook.pytest_deselected(items=faulted)
        items[:] = [i for i in items if i not in faulted]
    for item in items:
        try:
            tier = Path(item.path).resolve().relative_to(TESTS).parts[0]
        except ValueError:
            continue
        mark = DIRECTORY_MARKS.get(tier)
        if mark is not None and item.get_closest_marker(mark) is None:
            item.add_marker(getattr(pytest.mark, mark))
    if any(item.get_closest_marker(m) for item in items for m in ("spark", "integration", "notebook")):
        small_spark_drivers()


def small_spark_drivers() -> None:
    """Every Spark driver the session starts compiles with C1 only and, once a thread has made it, shares one archive
    of Spark's classes (tests/harness/jvm_cds.py: a fifth of the CPU to start); CONSISTENT_TEST_SMALL_JVM=0 leaves
    drivers as users run them."""
    if os.environ.get("CONSISTENT_TEST_SMALL_JVM") == "0" or SMALL_JVM in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        return
    users = os.environ.get("SPARK_SUBMIT_OPTS", "")

    def submit_opts(options: str) -> None:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{users} {options}".strip()

    submit_opts(SmallDrivers(TESTS.parent / "build" / "cds", on_ready=submit_opts).options())


# --- the product as a user installs it, built once per session (tests/harness/wheel.py) -----------------------
@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """``make dist``'s sdist and wheel with the jars, and a jar-less wheel, from a clean clone (minutes: Maven)."""
    return build_dists(tmp_path_factory.mktemp("wheel-build"))


@pytest.fixture(scope="session")
def product_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> ProductVenv:
    return ProductVenv(dists, tmp_path_factory.mktemp("wheel-venv"))


@pytest.fixture
def wheel_venv(product_venv: ProductVenv) -> Venv:
    """A fresh venv (no system site-packages, outside the repo) with the jar-less wheel and its ``[spark]`` extra."""
    return product_venv.holding("bare")


@pytest.fixture
def full_venv(product_venv: ProductVenv) -> Venv:
    """The same venv with the full wheel (every plugin jar) in the jar-less one's place."""
    return product_venv.holding("full")


@pytest.fixture(scope="module")
def dbt_venv(product_venv: ProductVenv) -> Venv:
    """The same venv with the full wheel and its ``[spark,dbt]`` extras (README: dbt), for a whole module."""
    return product_venv.with_dbt()


# --- servers, one per session ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the test session (started on first use, stopped at the end)."""
    try:
        server = PostgresServer.start()
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            raise  # CI runs scripts/setup.sh, which installs PostgreSQL: missing is a failure there
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rest_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
    """One Java REST catalog server for the test session (tests/harness/rest_server.py). Each test gets a
    catalog of its own on it (``rest_catalog``): a REST prefix with its own SQLite file, chosen by the
    test's warehouse location, so one JVM start (~1.5 s) serves the whole session."""
    try:
        server = RestCatalogServer(tmp_path_factory.mktemp("rest-server")).start()
    except (FileNotFoundError, RuntimeError) as exc:  # no JDK / no Iceberg runtime jar to build it with
        if os.environ.get("CI"):
            raise
        pytest.skip(f"REST catalog server unavailable: {exc}")
    yield server
    server.stop()


def rest_catalog(server: RestCatalogServer, tmp_path: Path):  # -> pyiceberg RestCatalog
    """A fresh catalog on the session's REST server whose warehouse is ``tmp_path/warehouse``."""
    return server.catalog(warehouse=f"file://{tmp_path}/warehouse")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3Server]:
    """moto's S3 server for the test session, on a thread of this process."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install -e '.[dev]')")
    server = MotoS3Server.start()
    yield server
    server.stop()


# --- Hive Metastore and Glue (docs/catalogs.md) ----------------------------------------------------------
@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Hive Metastore 2.3 (pyspark's jars, Derby) for the test session; tests work in databases of their own."""
    pytest.importorskip("hive_metastore", reason="pyiceberg[hive] is not installed (pip install -e '.[dev]')")
    from tests.harness.metastores import HiveMetastore

    server = HiveMetastore.start(tmp_path_factory.mktemp("hive-metastore"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def glue_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """moto's Glue server for the test session, made to check ``VersionId`` as Glue does (tests/harness/moto_glue.py)."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install -e '.[dev]')")
    from tests.harness.metastores import MotoGlue

    server = MotoGlue.start(tmp_path_factory.mktemp("glue"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def glue_unpatched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """moto's Glue server as it is: ``UpdateTable`` ignores ``VersionId`` (the probe must refuse it)."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install -e '.[dev]')")
    from tests.harness.metastores import MotoGlue

    server = MotoGlue.start(tmp_path_factory.mktemp("glue-unpatched"), patched=False)
    yield server
    server.stop()


# --- OpenLineage ---------------------------------------------------------------------------------------
@pytest.fixture
def ol_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No OpenLineage configuration but what the test gives: a clean cwd and home, no OPENLINEAGE_* variables.
    The client writes OPENLINEAGE__* aliases into os.environ itself; they are removed afterwards."""
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(key)
    (tmp_path / "cwd").mkdir()
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield tmp_path / "cwd"
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]


# --- a catalog per test ----------------------------------------------------------------------------
@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.integration),
    pytest.param("rest", marks=pytest.mark.integration),
    pytest.param("rest-faults", marks=pytest.mark.integration),
])
def backend(request: pytest.FixtureRequest) -> str:
    """Catalog backends the behaviour tests run against: SQLite, PostgreSQL on a server the session starts,
    an Iceberg REST catalog (the session's Java REST server, a catalog of its own per test), and that REST
    catalog seen by ``cc`` through ``FaultProxy`` (``FAULT_RULES``: a quarter of commits lost, refused,
    slow or reset; loads too), while ``catalog`` (the test's own independent reads) stays direct."""
    return request.param


#: the faults ``cc`` meets on the ``rest-faults`` backend: per route, kind -> probability (tests/harness/fault_proxy.py)
FAULT_RULES = {
    "commit": {"lost": 0.12, "refuse": 0.04, "throttle": 0.02, "slow": 0.02, "reset_before": 0.02, "reset_after": 0.03},
    "load": {"lost": 0.03, "refuse": 0.04, "reset_after": 0.02},
}


@pytest.fixture(scope="session")
def fault_proxy(rest_server: RestCatalogServer) -> Iterator[FaultProxy]:
    """``FaultProxy`` in front of the session's REST server with ``FAULT_RULES`` (seeded: the same draws each run)."""
    with FaultProxy(rest_server.port, seed=20, rules=FAULT_RULES, slow_seconds=2.0) as proxy:
        yield proxy


@pytest.fixture
def catalog(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> SqlCatalog:
    """A fresh, empty catalog per test (namespace ``demo``), its warehouse under ``tmp_path/warehouse``
    for every backend. For ``rest`` it is a pyiceberg ``RestCatalog``, not a ``SqlCatalog``."""
    if backend == "postgres":
        cat = postgres_sql_catalog(request.getfixturevalue("postgres_server"), tmp_path / "warehouse")
        request.addfinalizer(cat.engine.dispose)
    elif backend in ("rest", "rest-faults"):
        cat = rest_catalog(request.getfixturevalue("rest_server"), tmp_path)
    else:
        cat = sqlite_catalog(tmp_path)
    cat.create_namespace("demo")
    return cat


@pytest.fixture
def cc(catalog: SqlCatalog, backend: str, request: pytest.FixtureRequest) -> ConsistentCatalog:
    if backend == "rest-faults":  # the same catalog, its requests through the fault proxy
        from pyiceberg.catalog import load_catalog

        proxy = request.getfixturevalue("fault_proxy")
        return ConsistentCatalog(load_catalog(catalog.name, **{**catalog.properties, "uri": proxy.uri,
                                                               "consistent.request-timeout": "1s"}))
    return ConsistentCatalog(catalog)


@pytest.fixture
def flip_tables(catalog: SqlCatalog) -> tuple[str, str, str]:
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    catalog.create_table("demo.word_counts", schema=COUNTS_SCHEMA)
    catalog.create_table("demo.count_histogram", schema=HIST_SCHEMA)
    return "demo.words", "demo.word_counts", "demo.count_histogram"


@pytest.fixture
def make_words() -> Callable[..., pa.Table]:
    return words
