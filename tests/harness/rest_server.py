"""A real Iceberg REST catalog server for the tests, started and stopped by them.

Nothing installable here ships a REST catalog server, but Iceberg's own server logic does ship in the
Iceberg runtime jar we already have: ``jvm/rest-server`` is a small ``com.sun.net.httpserver`` front
for Iceberg's ``CatalogHandlers`` over a ``JdbcCatalog`` (SQLite file or PostgreSQL), compiled by
Maven (``scripts/build_jvm.sh``, the reactor ``jvm/pom.xml``) into ``build/jvm/rest-server`` (git-ignored). Commits therefore behave as in
the reference servers: requirements are validated against the metadata the JDBC compare-and-swap
replaces, a lost race is retried and re-validated, a stale requirement is a 409, and a body that does
not parse (an unknown requirement type included) is a 400.

One server, many catalogs: besides its root catalog (routes without a prefix) the server serves a
catalog per REST prefix, each a ``JdbcCatalog`` on its own SQLite file under ``<directory>/catalogs``,
created on first use. A client picks one with its ``warehouse`` property, which pyiceberg and Iceberg's
Java client send to ``GET /v1/config?warehouse=...``: a name gets a warehouse under the server
directory, a location URI (``file:///tmp/x/warehouse``) is used as the warehouse itself. So a test
session starts one JVM and every test still gets a fresh, isolated catalog (``tests/conftest.py``).

Usage::

    with RestCatalogServer(tmp_path) as server:      # SQLite file + warehouse under tmp_path
        catalog = server.catalog()                   # pyiceberg RestCatalog on server.uri (root catalog)
        mine = server.catalog(warehouse=f"file://{tmp_path}/w")   # its own catalog, data under tmp_path/w
        server.sqlite_path(f"file://{tmp_path}/w")   # that catalog's SQLite file (for independent reads)
        ...

    rest_server = rest_server_fixture()              # in a conftest: a session-scoped fixture
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build_jvm.sh"
MODULE = "rest-server"
MODULE_BUILD = ROOT / "build" / "jvm" / MODULE
MAIN_CLASS = "io.consistentcatalog.rest.RestCatalogServer"

# A small, quick-starting JVM: 2 shared cores, tests only (C1 only, serial GC, modest heap).
DEFAULT_JVM_OPTS: tuple[str, ...] = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


def ensure_built() -> tuple[str, str]:
    """``(java, classpath)`` for the server: ``scripts/build_jvm.sh rest-server`` (Maven; a silent no-op when
    nothing under jvm/ changed) writes its classes and its runtime ``classpath`` into build/jvm/rest-server."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"scripts/build_jvm.sh failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    classpath = f"{MODULE_BUILD / 'classes'}{os.pathsep}{(MODULE_BUILD / 'classpath').read_text().strip()}"
    return java_binary(), classpath


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` on the PATH (the JDK Maven compiled with)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


class RestCatalogServer:
    """The Java REST catalog server in a child process on 127.0.0.1.

    ``directory`` holds the server's log (``rest-server.log``) and, unless ``jdbc_uri``/``warehouse``
    are given, its SQLite catalog file (``catalog.db``) and warehouse (``warehouse/``); without a
    directory a temporary one is made and removed on stop. ``port=0`` (the default) lets the OS pick a
    free port, which the server reports in its ``READY <port>`` line: no race with other processes.
    ``properties`` are extra ``JdbcCatalog`` properties (``jdbc.user``, ``jdbc.schema-version``...).
    ``catalogs_dir`` (default ``directory/catalogs``) holds the per-prefix catalogs; ``False`` disables them.
    ``idempotency_key_lifetime`` (an ISO-8601 duration, e.g. ``"PT10M"``): the server advertises it and applies
    each ``Idempotency-Key`` once (protocol §6.8); by default it advertises none and ignores keys.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        jdbc_uri: str | None = None,
        warehouse: str | None = None,
        catalog_name: str = "lake",
        port: int = 0,
        properties: Mapping[str, str] | None = None,
        catalogs_dir: str | os.PathLike[str] | bool | None = None,
        idempotency_key_lifetime: str | None = None,
        jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
        startup_timeout: float = 120.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self._own_directory = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="cc-rest-")) if directory is None else Path(directory)
        self.jdbc_uri = jdbc_uri or f"jdbc:sqlite:{self.directory / 'catalog.db'}"
        self.warehouse = warehouse or f"file://{self.directory / 'warehouse'}"
        self.catalog_name = catalog_name
        self.requested_port = port
        self.properties = dict(properties or {})
        if catalogs_dir is False:
            self.catalogs_dir: Path | None = None
        elif catalogs_dir is None or catalogs_dir is True:
            self.catalogs_dir = self.directory / "catalogs"
        else:
            self.catalogs_dir = Path(catalogs_dir)
        self.idempotency_key_lifetime = idempotency_key_lifetime
        self.jvm_opts = tuple(jvm_opts)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log_path = self.directory / "rest-server.log"
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self.returncode: int | None = None
        self._process: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    # --- life cycle ------------------------------------------------------------------------------
    def start(self) -> RestCatalogServer:
        if self._process is not None:
            raise RuntimeError("already started")
        java, classpath = ensure_built()
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.warehouse.startswith("file://"):
            Path(self.warehouse[len("file://") :]).mkdir(parents=True, exist_ok=True)
        command = [java, *self.jvm_opts, "-cp", classpath, MAIN_CLASS, "--port", str(self.requested_port),
                   "--jdbc-uri", self.jdbc_uri, "--warehouse", self.warehouse, "--catalog-name", self.catalog_name,
                   "--exit-on-stdin-close"]
        if self.catalogs_dir is not None:
            self.catalogs_dir.mkdir(parents=True, exist_ok=True)
            command += ["--catalogs-dir", str(self.catalogs_dir)]
        for key, value in self.properties.items():
            command += ["--property", f"{key}={value}"]
        if self.idempotency_key_lifetime is not None:
            command += ["--idempotency-key-lifetime", self.idempotency_key_lifetime]

        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed in stop)
        started = time.monotonic()
        # stdin stays open while we live: the server exits when it closes (this process died).
        # Its own session: a Ctrl-C meant for pytest does not kill it before stop() does.
        self._process = subprocess.Popen(command, cwd=self.directory, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._log, text=True, start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(self._process.stdout, lines), daemon=True,
                         name=f"rest-server-stdout-{self._process.pid}").start()
        try:
            self.port = self._wait_ready(lines, started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, lines: queue.Queue[str | None], started: float) -> int:
        assert self._process is not None
        deadline = started + self.startup_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"REST catalog server not ready after {self.startup_timeout:.0f}s\n{self.log_tail()}")
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                code = self._process.wait(timeout=5)
                raise RuntimeError(f"REST catalog server exited with {code} before READY\n{self.log_tail()}")
            if line.startswith("READY "):
                return int(line.split()[1])

    def stop(self) -> None:
        """SIGTERM (the server's shutdown hook closes the catalog), then SIGKILL after ``stop_timeout``."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
            self.returncode = process.returncode
            for stream in (process.stdin, process.stdout):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RestCatalogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- use ---------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def uri(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def catalog(self, name: str = "lake", *, warehouse: str | os.PathLike[str] | None = None,
                **properties: Any) -> RestCatalog:
        """A new pyiceberg ``RestCatalog`` client on this server (no credentials: no OAuth call).

        Without ``warehouse``: the root catalog. With one: the catalog of that warehouse (a name, or a
        location such as ``file:///tmp/x/warehouse`` or a plain directory path), created on first use.
        """
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **self.catalog_properties(warehouse), **properties)  # type: ignore[return-value]

    def catalog_properties(self, warehouse: str | os.PathLike[str] | None = None) -> dict[str, str]:
        """The pyiceberg catalog properties for this server (``load_catalog(name, **props)``): plain strings,
        so they can be handed to another process (a worker) as they are."""
        props = {"type": "rest", "uri": self.uri}
        if warehouse is not None:
            props["warehouse"] = warehouse_location(warehouse)
        return props

    def prefix_for(self, warehouse: str | os.PathLike[str]) -> str:
        """The REST prefix the server gives ``warehouse`` (asked from ``GET /v1/config``, as clients do)."""
        query = urllib.parse.urlencode({"warehouse": warehouse_location(warehouse)})
        with urllib.request.urlopen(f"{self.uri}/v1/config?{query}", timeout=30) as response:
            return json.loads(response.read())["overrides"]["prefix"]

    def sqlite_path(self, warehouse: str | os.PathLike[str]) -> Path:
        """The SQLite file of ``warehouse``'s catalog (``iceberg_tables`` rows, catalog name ``lake``): for
        independent reads of the catalog's pointers, never for writes."""
        if self.catalogs_dir is None:
            raise RuntimeError("this server serves no per-prefix catalogs (catalogs_dir=False)")
        return self.catalogs_dir / self.prefix_for(warehouse) / "catalog.db"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def warehouse_location(warehouse: str | os.PathLike[str]) -> str:
    """A warehouse as a client sends it: a name or a URI unchanged, a plain path as ``file:///abs/path``."""
    text = os.fspath(warehouse).strip()
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", text):
        return text
    return "file://" + str(Path(text).expanduser().absolute())


def expected_prefix(warehouse: str | os.PathLike[str]) -> str:
    """The prefix the server derives (computed here independently of it): a name is its own prefix, a
    location URI ``wh-`` + 16 hex digits of the SHA-256 of the URI without trailing slashes."""
    location = warehouse_location(warehouse)
    if "://" not in location:
        return location
    while location.endswith("/") and not location.endswith("://"):
        location = location[:-1]
    return "wh-" + hashlib.sha256(location.encode()).hexdigest()[:16]


def _pump(stream: IO[str] | None, lines: queue.Queue[str | None]) -> None:
    """Forward the server's stdout lines (only READY is expected); None marks EOF."""
    if stream is not None:
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                lines.put(line.strip())
    lines.put(None)


def rest_server_fixture(scope: str = "session", name: str = "rest_server", **server_kwargs: Any) -> Callable[..., Any]:
    """A pytest fixture (default: session-scoped, named ``rest_server``) yielding a started server with its
    own SQLite catalog in a pytest temporary directory. In a conftest: ``rest_server = rest_server_fixture()``."""

    @pytest.fixture(scope=scope, name=name)  # type: ignore[call-overload]
    def _rest_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
        with RestCatalogServer(tmp_path_factory.mktemp("rest-catalog"), **server_kwargs) as server:
            yield server

    return _rest_server
