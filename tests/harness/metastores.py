"""The catalogs most Iceberg users run, on one machine: a Hive Metastore and AWS Glue (moto) (docs/catalogs.md).

**Hive Metastore 2.3** (``HiveMetastore``) runs from the jars pyspark ships (metastore, Derby, DataNucleus,
HikariCP): no download. Derby in the server's directory, schema created by DataNucleus. Traps (STACK.md):
asynchronous logging fails the start (``hive.async.log.enabled=false``); the lock API needs HikariCP; the lock
tables (``HIVE_LOCKS``...) are created only under ``hive.in.test=true``, by the first call to the transaction
API, and pyiceberg's lock call fails while that flag is on: so the first start makes one such call
(``show_locks``), and the server is restarted without the flag on the same Derby files (``start`` does both;
~20-50 s on a busy machine).

**AWS Glue** (``MotoGlue``) is moto's server in a child process started by ``tests/harness/moto_glue.py``,
which makes moto behave as Glue does (``UpdateTable``'s ``VersionId`` checked) unless ``patched=False``.
The warehouse is a local directory (``file://``); pyiceberg's ``GlueCatalog`` reaches the server by
``glue.endpoint`` with dummy keys.

Both serve one catalog for a whole session: tests work in namespaces (Hive/Glue databases) of their own,
or ``reset`` it. Usage::

    with HiveMetastore.start() as hms, MotoGlue.start() as glue:
        hive = hms.catalog()          # pyiceberg HiveCatalog
        aws = glue.catalog()          # pyiceberg GlueCatalog
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from tests.harness.rest_server import java_binary
from tests.harness.servers import free_port, listening, stop_group

ROOT = Path(__file__).resolve().parents[2]
HMS_MAIN = "org.apache.hadoop.hive.metastore.HiveMetaStore"
HMS_VERSION = "2.3"
GLUE_REGION, GLUE_ACCOUNT = "us-east-1", "123456789012"  # moto's default account
GLUE_KEYS = {"glue.access-key-id": "testing", "glue.secret-access-key": "testing", "glue.region": GLUE_REGION}
GLUE_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": GLUE_REGION}
"""The same credentials where Iceberg's AWS SDK reads them in a JVM (its environment, set before the JVM starts)."""


def glue_catalog_uri(endpoint: str) -> str:
    """The catalog URI ``init`` and ``spark-conf`` take for a Glue-compatible endpoint (moto's, or a proxy's)."""
    return f"arn:aws:glue:{GLUE_REGION}:{GLUE_ACCOUNT}?endpoint={endpoint}"


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _wait_listening(port: int, process: subprocess.Popen[Any], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(port):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}\n{_tail(log)}")
        time.sleep(0.2)
    raise TimeoutError(f"{what} not listening on {port} after {timeout:.0f} s\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    return ""


class _ChildServer:
    """A server in a child process of its own group, its output in ``directory/server.log``."""

    name = "server"

    def __init__(self, directory: Path, own_directory: bool) -> None:
        self.directory = directory
        self._own_directory = own_directory
        self.log_path = directory / "server.log"
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _spawn(self, command: list[str], timeout: float, env: dict[str, str] | None = None) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in _halt)
        self._process = subprocess.Popen(command, cwd=self.directory, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, start_new_session=True, env=env)
        assert self.port is not None
        _wait_listening(self.port, self._process, timeout, self.name, self.log_path)

    def _halt(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, grace=15)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        self._halt()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HiveMetastore(_ChildServer):
    """A Hive Metastore 2.3 (Thrift) on 127.0.0.1, Derby in ``directory``; ``warehouse`` a local directory."""

    name = "hive-metastore"
    version = HMS_VERSION

    def __init__(self, directory: Path, own_directory: bool) -> None:
        super().__init__(directory, own_directory)
        self.warehouse = f"file://{directory / 'warehouse'}"

    @classmethod
    def start(cls, directory: str | os.PathLike[str] | None = None, *, timeout: float = 180.0) -> HiveMetastore:
        own = directory is None
        path = Path(tempfile.mkdtemp(prefix="cc-hms-")) if directory is None else Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / "warehouse").mkdir(exist_ok=True)
        server = cls(path, own)
        started = time.monotonic()
        try:
            server.port = free_port()
            server._spawn(server._command(in_test=True), timeout)
            server._create_lock_tables()
            server._halt()
            server.port = free_port()
            server._spawn(server._command(in_test=False), timeout)
        except BaseException:
            server.stop()
            raise
        server.startup_seconds = time.monotonic() - started
        return server

    def _create_lock_tables(self) -> None:
        """The first call to the transaction API under ``hive.in.test`` creates its tables (``TxnDbUtil.prepDb``)."""
        from hive_metastore.ttypes import ShowLocksRequest
        from pyiceberg.catalog.hive import _HiveClient

        with _HiveClient(self.uri) as client:
            client.show_locks(ShowLocksRequest())

    def _command(self, *, in_test: bool) -> list[str]:
        settings = {
            "hive.async.log.enabled": "false",
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.directory / 'metastore_db'};create=true",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "datanucleus.connectionPoolingType": "HikariCP",
            "hive.metastore.warehouse.dir": self.warehouse,
            "derby.stream.error.file": str(self.directory / "derby.log"),
        }
        if in_test:
            settings["hive.in.test"] = "true"
        return [java_binary(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                *(f"-D{k}={v}" for k, v in settings.items()),
                "-cp", f"{pyspark_jars()}{os.sep}*", HMS_MAIN, "-p", str(self.port)]

    @property
    def uri(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"thrift://127.0.0.1:{self.port}"

    def catalog_properties(self) -> dict[str, str]:
        return {"type": "hive", "uri": self.uri, "warehouse": self.warehouse}

    def catalog(self, name: str = "lake", **properties: Any) -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **{**self.catalog_properties(), **properties})

    def reset(self) -> None:
        reset_catalog(self.catalog())


class MotoGlue(_ChildServer):
    """moto's Glue (and S3) server on 127.0.0.1 in a child process; ``patched``: ``VersionId`` checked as Glue does."""

    name = "moto-glue"

    def __init__(self, directory: Path, own_directory: bool, patched: bool) -> None:
        super().__init__(directory, own_directory)
        self.patched = patched
        self.warehouse = f"file://{directory / 'warehouse'}"

    @classmethod
    def start(cls, directory: str | os.PathLike[str] | None = None, *, patched: bool = True,
              timeout: float = 60.0) -> MotoGlue:
        own = directory is None
        path = Path(tempfile.mkdtemp(prefix="cc-glue-")) if directory is None else Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        (path / "warehouse").mkdir(exist_ok=True)
        server = cls(path, own, patched)
        started = time.monotonic()
        command = [sys.executable, "-m", "tests.harness.moto_glue", "PORT", *([] if patched else ["--unpatched"])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        try:
            for attempt in range(3):
                server.port = free_port()
                command[3] = str(server.port)
                try:
                    server._spawn(command, timeout, env=env)
                    break
                except RuntimeError:
                    server._halt()
                    if attempt == 2:
                        raise
        except BaseException:
            server.stop()
            raise
        server.startup_seconds = time.monotonic() - started
        return server

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def catalog_properties(self) -> dict[str, str]:
        return {"type": "glue", "glue.endpoint": self.endpoint, **GLUE_KEYS, "warehouse": self.warehouse}

    def catalog(self, name: str = "lake", **properties: Any) -> Any:
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **{**self.catalog_properties(), **properties})

    def reset(self) -> None:
        reset_catalog(self.catalog())


def reset_catalog(catalog: Any) -> None:
    """Drop every table (metadata only) and every namespace: an empty catalog (a Hive Metastore keeps its database
    ``default``, which cannot be dropped)."""
    for namespace in catalog.list_namespaces():
        for table in catalog.list_tables(namespace):
            catalog.drop_table(table)
        if namespace != ("default",):
            catalog.drop_namespace(namespace)
