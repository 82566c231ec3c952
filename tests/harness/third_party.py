"""REST catalog servers we did not write, started and stopped by the tests (docs/catalogs.md).

**Iceberg's REST fixture** (``org.apache.iceberg.rest.RESTCatalogServer`` from ``iceberg-open-api``'s test
fixtures: what Iceberg's REST compatibility kit and its ``apache/iceberg-rest-fixture`` image run). Its
jars are copied from Maven Central by ``scripts/third_party_servers.sh`` (``make setup``; the pom is
``scripts/third-party/pom.xml``) into the git-ignored ``build/third-party/iceberg-rest-fixture-<version>``.
It is configured as its image is, by ``CATALOG_*`` environment variables: a ``JdbcCatalog`` on a SQLite
file and a ``file://`` warehouse under the server's directory, port 0 (the port Jetty picked is read from
its ``Started ServerConnector ... {0.0.0.0:<port>}`` log line).

It serves one catalog (no per-warehouse prefixes as our server has): tests share one server per module
and each gets the catalog emptied (``reset``), or works in namespaces of its own.

**Project Nessie** is not here: the registry this project builds from serves no ``nessie-quarkus`` jar
(runner or plain, 0.104.5-0.110.0 tried on 2026-11-27), and ``ConsistentCatalog`` refuses a Nessie catalog
anyway (protocol §6.5, ``connect.refuse_unsupported``): see docs/catalogs.md.

Usage::

    with IcebergRestFixture(tmp_path) as server:
        catalog = server.catalog()       # pyiceberg RestCatalog
        server.reset()                   # drop every table and namespace
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from tests.harness.rest_server import DEFAULT_JVM_OPTS, java_binary

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog

ROOT = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = ROOT / "scripts" / "third_party_servers.sh"
ICEBERG_FIXTURE_VERSION = "1.11.0"
"""Keep equal to ``iceberg.version`` in scripts/third-party/pom.xml (the test below reads both)."""
ICEBERG_FIXTURE_LIB = ROOT / "build" / "third-party" / f"iceberg-rest-fixture-{ICEBERG_FIXTURE_VERSION}"
ICEBERG_FIXTURE_MAIN = "org.apache.iceberg.rest.RESTCatalogServer"
_STARTED = re.compile(r"Started .*ServerConnector@\S+\{HTTP/1\.1.*\}\{[^:}]*:(\d+)\}")


def ensure_fetched() -> Path:
    """The fixture's jar folder: ``scripts/third_party_servers.sh`` fills it (Maven; a no-op when present)."""
    if not (ICEBERG_FIXTURE_LIB / ".complete").is_file():
        result = subprocess.run(["bash", str(FETCH_SCRIPT)], cwd=ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"scripts/third_party_servers.sh failed ({result.returncode}):\n"
                               f"{result.stdout}{result.stderr}")
    return ICEBERG_FIXTURE_LIB


class IcebergRestFixture:
    """Iceberg's REST fixture server in a child process; ``directory`` holds its SQLite file, warehouse and log."""

    name = "iceberg-fixture"
    version = ICEBERG_FIXTURE_VERSION

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
                 environment: Mapping[str, str] | None = None, startup_timeout: float = 120.0) -> None:
        self._own_directory = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="cc-iceberg-fixture-")) if directory is None else Path(directory)
        self.warehouse = f"file://{self.directory / 'warehouse'}"
        self.jvm_opts = tuple(jvm_opts)
        self.environment = dict(environment or {})
        self.startup_timeout = startup_timeout
        self.log_path = self.directory / "server.log"
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> IcebergRestFixture:
        lib = ensure_fetched()
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "warehouse").mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env.update({
            "CATALOG_WAREHOUSE": self.warehouse,
            "CATALOG_URI": f"jdbc:sqlite:file:{self.directory / 'catalog.db'}",
            "CATALOG_JDBC_INIT__CATALOG__TABLES": "true",
            "CATALOG_REST_PORT": "0",
            **self.environment,
        })
        command = [java_binary(), *self.jvm_opts, "-cp", f"{lib}{os.sep}*", ICEBERG_FIXTURE_MAIN]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        started = time.monotonic()
        self._process = subprocess.Popen(command, cwd=self.directory, env=env, stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.port = self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> int:
        assert self._process is not None
        while time.monotonic() - started < self.startup_timeout:
            match = _STARTED.search(self.log_path.read_text(encoding="utf-8", errors="replace"))
            if match:
                return int(match.group(1))
            if self._process.poll() is not None:
                raise RuntimeError(f"Iceberg REST fixture exited with {self._process.returncode}\n{self.log_tail()}")
            time.sleep(0.05)
        raise TimeoutError(f"Iceberg REST fixture not ready after {self.startup_timeout:.0f}s\n{self.log_tail()}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_directory:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> IcebergRestFixture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def uri(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def catalog_properties(self) -> dict[str, str]:
        return {"type": "rest", "uri": self.uri}

    def catalog(self, name: str = "lake", **properties: Any) -> RestCatalog:
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **self.catalog_properties(), **properties)  # type: ignore[return-value]

    def reset(self) -> None:
        """Drop every table (metadata only; the warehouse files stay) and every namespace: an empty catalog."""
        catalog = self.catalog()
        for namespace in catalog.list_namespaces():
            for table in catalog.list_tables(namespace):
                catalog.drop_table(table)
            catalog.drop_namespace(namespace)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        return ""


def iceberg_fixture(scope: str = "module", name: str = "iceberg_fixture") -> Callable[..., Any]:
    """A pytest fixture (default: module-scoped) yielding a started ``IcebergRestFixture``."""

    @pytest.fixture(scope=scope, name=name)  # type: ignore[call-overload]
    def _fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergRestFixture]:
        try:
            server = IcebergRestFixture(tmp_path_factory.mktemp("iceberg-fixture")).start()
        except (FileNotFoundError, RuntimeError) as exc:
            if os.environ.get("CI"):
                raise
            pytest.skip(f"Iceberg REST fixture unavailable: {exc}")
        yield server
        server.stop()

    return _fixture
