"""moto's S3 server with an artificial latency per request, in a process of its own (for benchmarks).

A real object store answers each request after a network round-trip and costs the client no CPU.
moto answers at once, and ``tests.harness.servers.MotoS3Server`` serves it from a thread of the
client's own process. This serves moto from a separate process and delays every request by a
configurable time before moto handles it (a WSGI middleware: requests are served on threads, so
concurrent requests wait concurrently, as they would on a network).

Control endpoints (not S3): ``POST /__latency__?ms=20`` sets the delay, ``GET /__stats__`` returns
``{"requests": n, "latency_ms": ms}`` (requests counted since the last ``POST /__stats__``).

    .venv/bin/python -m bench.latency_s3 --port 9000 [--latency-ms 20]

``LatencyS3`` starts and stops it from a benchmark.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs


class LatencyMiddleware:
    def __init__(self, app: Any, latency_ms: float) -> None:
        self.app = app
        self.latency = latency_ms / 1000
        self.requests = 0
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/__latency__":
            self.latency = float(parse_qs(environ.get("QUERY_STRING", ""))["ms"][0]) / 1000
            return self._json(start_response, {"latency_ms": self.latency * 1000})
        if path == "/__stats__":
            stats = {"requests": self.requests, "latency_ms": self.latency * 1000}
            if environ.get("REQUEST_METHOD") == "POST":
                with self._lock:
                    self.requests = 0
            return self._json(start_response, stats)
        with self._lock:
            self.requests += 1
        if self.latency > 0:
            time.sleep(self.latency)
        return self.app(environ, start_response)

    @staticmethod
    def _json(start_response: Any, body: dict[str, Any]) -> list[bytes]:
        data = json.dumps(body).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]


def serve(port: int, latency_ms: float) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = LatencyMiddleware(DomainDispatcherApplication(create_backend_app), latency_ms)
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    print("ready", flush=True)
    server.serve_forever()


@dataclass
class LatencyS3:
    """The server process, started by ``start``; ``properties()`` are pyiceberg's FileIO settings for it."""

    port: int
    process: subprocess.Popen

    @classmethod
    def start(cls, port: int, latency_ms: float = 0) -> LatencyS3:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.latency_s3", "--port", str(port), "--latency-ms", str(latency_ms)],
            stdout=subprocess.PIPE, text=True,
        )
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            process.kill()
            raise RuntimeError("the moto S3 server did not start")
        return cls(port, process)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, path: str, method: str = "GET") -> dict[str, Any]:
        request = urllib.request.Request(self.endpoint + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def set_latency(self, ms: float) -> None:
        self._call(f"/__latency__?ms={ms}", "POST")

    def requests(self, reset: bool = False) -> int:
        return int(self._call("/__stats__", "POST" if reset else "GET")["requests"])

    def properties(self) -> dict[str, str]:
        from tests.harness.servers import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY

        return {"s3.endpoint": self.endpoint, "s3.access-key-id": S3_ACCESS_KEY,
                "s3.secret-access-key": S3_SECRET_KEY, "s3.region": S3_REGION}

    def create_bucket(self, name: str) -> str:
        import boto3
        from tests.harness.servers import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY

        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=S3_ACCESS_KEY,
                     aws_secret_access_key=S3_SECRET_KEY, region_name=S3_REGION).create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        self.process.terminate()  # the process this object started
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=0)
    args = parser.parse_args(argv)
    serve(args.port, args.latency_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
