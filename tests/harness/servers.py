"""Real servers for the backend tests and benchmarks, on 127.0.0.1, started and stopped by their user.

- ``PostgresServer``: a throwaway PostgreSQL cluster (``initdb`` into a temporary directory, ``pg_ctl``
  start on a free loopback port, trust authentication). PostgreSQL refuses to run as root, so under
  root it runs as the ``postgres`` OS user (created by Debian's ``postgresql`` package) via ``runuser``.
- ``MotoS3Server``: moto's S3 API served by ``moto.server.ThreadedMotoServer`` on a thread of this
  process (no child process), one bucket per user.

Both work outside pytest too (``bench/bench_backends.py``): ``with PostgresServer.start() as pg:``.
The session-scoped pytest fixtures that start them for the tests are in ``tests/conftest.py``; a
database or a bucket per test keeps tests apart.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Any

PG_OS_USER = "postgres"
PG_SUPERUSER = "postgres"
S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION = "testing", "testing", "us-east-1"
# Durability is not under test; these make initdb, CREATE DATABASE and commits several times faster.
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop_group(process: subprocess.Popen[Any], grace: float = 60) -> None:
    """SIGTERM to the process's own group (a Spark server's shutdown hooks clean up), SIGKILL if it outlives
    ``grace`` s (0: at once)."""
    if process.poll() is not None:
        return
    if grace > 0:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
            return
        except ProcessLookupError:  # the group is gone already: reap the process
            process.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=60)


# --- PostgreSQL --------------------------------------------------------------------------------------
def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: newest /usr/lib/postgresql/*/bin, else PATH."""
    for candidate in sorted(glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    return None


@dataclass
class PostgresServer:
    """A running throwaway PostgreSQL cluster on 127.0.0.1 (trust authentication, superuser ``postgres``)."""

    bin_dir: Path
    data_dir: Path
    port: int
    run_as: str | None  # OS user the server runs as (None: the current user)
    databases: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, *, fast: bool = True, max_connections: int = 300) -> PostgresServer:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found; apt-get install postgresql")
        run_as = None
        root = os.geteuid() == 0
        # As root the server runs as another user, who must reach the directory: /tmp, not $TMPDIR.
        base = Path(tempfile.mkdtemp(prefix="cc-postgres-", dir="/tmp" if root else None))
        if root:
            try:
                account = pwd.getpwnam(PG_OS_USER)
            except KeyError:
                raise RuntimeError(f"running as root and there is no {PG_OS_USER!r} OS user to run PostgreSQL as; "
                                   "apt-get install postgresql creates it") from None
            run_as = PG_OS_USER
            os.chown(base, account.pw_uid, account.pw_gid)
        server = cls(bin_dir, base / "data", free_port(), run_as)
        try:
            server._run("initdb", "-D", str(server.data_dir), "-A", "trust", "-U", PG_SUPERUSER, "-E", "UTF8",
                        "--no-sync", "--locale=C")
            settings = {"listen_addresses": "127.0.0.1", "port": str(server.port),
                        "unix_socket_directories": str(base), "max_connections": str(max_connections),
                        **(FAST_SETTINGS if fast else {})}
            with open(server.data_dir / "postgresql.conf", "a", encoding="utf-8") as conf:
                conf.writelines(f"{key} = '{value}'\n" for key, value in settings.items())
            for attempt in range(3):
                try:
                    server._run("pg_ctl", "-D", str(server.data_dir), "-l", str(base / "server.log"), "-w", "-t", "60",
                                "start")
                    break
                except subprocess.CalledProcessError:
                    if attempt == 2:
                        raise
                    server.port = free_port()  # the port was taken meanwhile: another try
                    with open(server.data_dir / "postgresql.conf", "a", encoding="utf-8") as conf:
                        conf.write(f"port = '{server.port}'\n")
        except BaseException as exc:
            log = base / "server.log"
            detail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            server.stop()
            if isinstance(exc, subprocess.CalledProcessError):
                raise RuntimeError(f"PostgreSQL did not start: {exc.stderr or exc}\n{detail}") from None
            raise
        return server

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / tool), *args]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        return subprocess.run(command, check=True, capture_output=True, text=True, cwd=self.data_dir.parent)

    def uri(self, database: str = "postgres") -> str:
        """pyiceberg / SQLAlchemy URI (``consistent_catalog.spark.session`` turns it into a JDBC URI)."""
        return f"postgresql+psycopg2://{PG_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _admin(self, statement: str) -> None:
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=self.port, user=PG_SUPERUSER, dbname="postgres")
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(statement)
        finally:
            con.close()

    def create_database(self, prefix: str = "lake") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    restarts: int = 0

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server at once (``-m immediate``: connections cut, as in a crash), stay down
        ``down_seconds``, start it again on the same port and data."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        time.sleep(down_seconds)
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.data_dir.parent / "server.log"), "-w", "-t", "60",
                  "start")
        self.restarts += 1

    def stop(self) -> None:
        base = self.data_dir.parent
        if (self.data_dir / "postmaster.pid").is_file():
            try:
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
                os.kill(pid, signal.SIGKILL)  # the server we started, by its own pid
        shutil.rmtree(base, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def postgres_sql_catalog(server: PostgresServer, warehouse: Path, name: str = "lake", **properties: str):
    """A pyiceberg SqlCatalog in a fresh database of ``server`` (warehouse: a local directory or ``s3://`` URI)."""
    from pyiceberg.catalog.sql import SqlCatalog

    database = server.create_database()
    location = warehouse if isinstance(warehouse, str) else f"file://{warehouse}"
    if not isinstance(warehouse, str):
        warehouse.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=server.uri(database), warehouse=location, **properties)


# --- S3 (moto) ---------------------------------------------------------------------------------------
@dataclass
class MotoS3Server:
    """moto's S3 API on 127.0.0.1, served from a thread of this process; ``properties()`` are pyiceberg's FileIO settings."""

    port: int
    server: Any  # moto.server.ThreadedMotoServer

    @classmethod
    def start(cls) -> MotoS3Server:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request on stderr
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: the OS picks a free one
        server.start()
        _, port = server.get_host_and_port()
        return cls(port, server)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=S3_ACCESS_KEY,
                            aws_secret_access_key=S3_SECRET_KEY, region_name=S3_REGION)

    def create_bucket(self, prefix: str = "lake") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for this server (PyArrow's S3 filesystem)."""
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": S3_ACCESS_KEY,
                "s3.secret-access-key": S3_SECRET_KEY, "s3.region": S3_REGION}

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for S3A against this server (jars: ``find_s3a_jars``)."""
        return s3a_conf(self.endpoint, S3_ACCESS_KEY, S3_SECRET_KEY)

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> MotoS3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- Spark's S3A ------------------------------------------------------------------------------------
def find_s3a_jars() -> list[str] | None:
    """hadoop-aws (matching the line's Hadoop) and its AWS SDK bundle, copied from Maven Central into
    build/jvm/spark-<line>/lib/s3 by the Maven build (scripts/build_jvm.sh, make setup)."""
    from consistent_catalog.spark.session import checkout_line_dir

    directory = checkout_line_dir() / "lib" / "s3"
    # the SDK: v1's aws-java-sdk-bundle for Hadoop 3.3 (Spark 3.5), v2's bundle for Hadoop 3.4 (Spark 4.1)
    sdk = sorted(directory.glob("aws-java-sdk-bundle-*.jar")) or sorted(directory.glob("bundle-*.jar"))
    jars = [sorted(directory.glob("hadoop-aws-*.jar")), sdk]
    if not all(jars):
        return None
    return [str(found[-1]) for found in jars]


def s3a_conf(endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """Hadoop S3A for ``s3://`` paths (hadoop-aws and the SDK bundle it was built with, from Maven Central)."""
    return {
        "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.endpoint.region": S3_REGION,
    }
