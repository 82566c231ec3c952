"""An HTTP proxy on 127.0.0.1 that injects catalog faults between a REST client and a real Iceberg REST server.

``FaultProxy(target_port, seed=7, rules={"commit": {"lost": 0.2}}).start()`` listens on a free loopback
port and forwards every request (any method, path and query, body, end-to-end headers) to
``127.0.0.1:target_port``, then hands the target's status, headers and body back verbatim (hop-by-hop
headers dropped, a correct Content-Length set). Clients keep their connections alive as pyiceberg's
``requests`` session does; each forwarded request opens its own connection to the target, so a fault
never leaves a half-used upstream connection behind. It serves clients concurrently (a daemon thread
per connection) and stops with ``stop()`` (or as a context manager). Loopback only: it never connects
anywhere but ``127.0.0.1:target_port``.

Each request gets a route from ``route_of(method, path)``: ``"commit"`` (the updateTable POST
``.../namespaces/<ns>/tables/<table>`` or the POST ``.../transactions/commit``), ``"load"`` (the GET of
``.../namespaces/<ns>/tables/<table>``) or ``"other"`` (config, lists, create, drop, metrics, ...). The
fault, if any, is drawn for the route from ``rules[route]`` = ``{kind: probability}`` with a
``random.Random(seed)``, one draw per request under a lock, so a seed gives the same decisions for the
same sequence of requests (whatever the rules were for earlier requests). The kinds:

``lost``          forwarded (the target applies it), then ``504`` with an Iceberg REST error body: the
                  commit landed, its answer was lost (pyiceberg: ``CommitStateUnknownException``)
``lost_503``      forwarded (applied), then ``503``: a gateway that gives up after forwarding
``refuse``        not forwarded; ``503`` with an Iceberg REST error body (nothing applied)
``throttle``      not forwarded; ``429`` with ``Retry-After: 0``
``fail_500``      not forwarded; ``500``: the server failing at the request (a bug, a file it cannot read)
``slow``          forwarded, the answer held ``slow_seconds`` (a client with a shorter timeout gives up
                  after the target applied it)
``reset_before``  not forwarded; the client connection is reset (RST, no answer)
``reset_after``   forwarded (applied), then the client connection is reset without an answer

``down()`` makes every request a ``503`` without forwarding (an unavailable catalog) until ``up()``;
such requests count as kind ``"down"`` and still consume their draw. ``counts`` is a
``Counter[(route, kind)]`` (kind ``"pass"`` when nothing was injected) and ``events`` the list of
``(route, method, path, kind)`` in arrival order; ``connections`` counts the client connections
accepted (keep-alive reuse shows as fewer connections than requests).

``keys`` lists ``(route, Idempotency-Key or None)`` for every request, in arrival order (what the client sent).
``script(route, kind, ...)`` makes the next requests of ``route`` get those kinds, in order, before the rules
apply again (each still consumes its draw). ``lose_first_of_each_key=True`` loses (forwards, then ``504``) the
answer of the first commit carrying each ``Idempotency-Key`` and passes its repeats: every keyed commit's
answer lost once, whichever client and whatever it sends in between.

In front of AWS Glue (moto's server) the route is read from the ``X-Amz-Target`` header instead.
Routes are read from the path alone, as the REST spec lays it out under an optional prefix; the one
ambiguous shape is a table sub-resource of a namespace literally named ``namespaces`` holding a table
named ``tables`` (``/v1/namespaces/namespaces/tables/tables/metrics``), which reads as a commit.
"""

from __future__ import annotations

import http.client
import json
import math
import numbers
import os
import random
import socket
import socketserver
import struct
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"
ROUTES = ("commit", "load", "other")
FAULTS = ("lost", "lost_503", "refuse", "throttle", "fail_500", "slow", "reset_before", "reset_after")
"""Fault kinds; a draw walks them in this order, whatever the order of a rule's keys."""
PASS = "pass"
DOWN = "down"
UPSTREAM_TIMEOUT = 60.0
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""Headers that describe one connection, never forwarded (RFC 9110 7.6.1), plus those the Connection header names."""
MAX_CHUNK_LINE = 65537


GLUE_ROUTES = {"AWSGlue.UpdateTable": "commit", "AWSGlue.GetTable": "load", "AWSGlue.GetTables": "load"}
"""AWS Glue's JSON protocol names the operation in ``X-Amz-Target`` (all requests are ``POST /``)."""


def route_of(method: str, path: str, target: str | None = None) -> str:
    """``"commit"``, ``"load"`` or ``"other"`` for an Iceberg REST request (path with or without query), or for an
    AWS Glue request by its ``X-Amz-Target`` (``UpdateTable``: commit; ``GetTable``, ``GetTables``: load)."""
    if target:
        return GLUE_ROUTES.get(target, "other")
    parts = path.split("?", 1)[0].split("#", 1)[0].split("/")
    method = method.upper()
    table = len(parts) >= 5 and parts[-4] == "namespaces" and parts[-2] == "tables" and bool(parts[-3] and parts[-1])
    if method == "POST" and (table or (len(parts) >= 3 and parts[-2:] == ["transactions", "commit"])):
        return "commit"
    if method == "GET" and table:
        return "load"
    return "other"


def validate_rules(rules: Mapping[str, Mapping[str, float]] | None) -> dict[str, tuple[tuple[str, float], ...]]:
    """The rules checked and put in draw order (per route, ``FAULTS`` order, zero probabilities dropped)."""
    checked: dict[str, tuple[tuple[str, float], ...]] = {}
    for route, kinds in (rules or {}).items():
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r} in fault rules (routes: {', '.join(ROUTES)})")
        for kind, probability in kinds.items():
            if kind not in FAULTS:
                raise ValueError(f"unknown fault kind {kind!r} for route {route!r} (kinds: {', '.join(FAULTS)})")
            if isinstance(probability, bool) or not isinstance(probability, numbers.Real):
                raise ValueError(f"probability of {kind!r} for route {route!r} is not a number: {probability!r}")
            if not math.isfinite(probability) or probability < 0:
                raise ValueError(f"probability of {kind!r} for route {route!r} must be >= 0, got {probability!r}")
        total = math.fsum(kinds.values())
        if total > 1 + 1e-9:
            raise ValueError(f"probabilities for route {route!r} sum to {total:g} > 1")
        checked[route] = tuple((kind, float(kinds[kind])) for kind in FAULTS if kinds.get(kind, 0) > 0)
    return checked


class FaultProxy:
    def __init__(
        self,
        target_port: int,
        *,
        seed: int = 0,
        rules: Mapping[str, Mapping[str, float]] | None = None,
        slow_seconds: float = 5.0,
        lose_first_of_each_key: bool = False,
    ) -> None:
        if not math.isfinite(slow_seconds) or slow_seconds < 0:
            raise ValueError(f"slow_seconds must be >= 0, got {slow_seconds!r}")
        self.target_port = target_port
        self.seed = seed
        self.slow_seconds = slow_seconds
        self.port: int | None = None
        self.counts: Counter[tuple[str, str]] = Counter()
        self.events: list[tuple[str, str, str, str]] = []
        self.connections = 0
        self.keys: list[tuple[str, str | None]] = []
        self.lose_first_of_each_key = lose_first_of_each_key
        self._scripts: dict[str, list[str]] = {}
        self._request = threading.local()  # set by the handler thread (subclasses override _decide's old signature)
        self._rules = validate_rules(rules)
        self._random = random.Random(seed)
        self._down = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        if self.port is None:
            raise RuntimeError("proxy not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def is_down(self) -> bool:
        return self._down

    def set_rules(self, rules: Mapping[str, Mapping[str, float]] | None) -> None:
        """Replace the rules (validated first; requests already decided keep their decision)."""
        checked = validate_rules(rules)
        with self._lock:
            self._rules = checked

    def script(self, route: str, *kinds: str) -> None:
        """The next requests of ``route`` get ``kinds`` (fault kinds or ``"pass"``), in order, whatever the rules."""
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r} (routes: {', '.join(ROUTES)})")
        for kind in kinds:
            if kind not in (*FAULTS, PASS):
                raise ValueError(f"unknown fault kind {kind!r} (kinds: {', '.join(FAULTS)}, {PASS})")
        with self._lock:
            self._scripts.setdefault(route, []).extend(kinds)

    def down(self) -> None:
        """Answer every request 503 without forwarding, whatever the rules, until ``up()``."""
        with self._lock:
            self._down = True

    def up(self) -> None:
        with self._lock:
            self._down = False

    def start(self) -> FaultProxy:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((LOOPBACK, 0), _Handler)
        server.proxy = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fault-proxy-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        self._stopping.set()  # cuts "slow" holds short
        server.shutdown()
        server.server_close()
        with self._lock:
            still_open = list(self._open)
        for conn in still_open:  # idle keep-alive connections: their threads wake up and end
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- used by the handler threads ---

    def _decide(self, method: str, path: str, target: str | None = None) -> tuple[str, str]:
        route = route_of(method, path, target)
        key = getattr(self._request, "key", None)  # the Idempotency-Key of the request this thread decides for
        with self._lock:
            draw = self._random.random()
            kind = PASS
            scripted = self._scripts.get(route)
            if self._down:
                kind = DOWN
            elif scripted:
                kind = scripted.pop(0)
            elif self.lose_first_of_each_key and route == "commit" and key is not None:
                kind = PASS if (route, key) in self.keys else "lost"
            else:
                bound = 0.0
                for fault, probability in self._rules.get(route, ()):
                    bound += probability
                    if draw < bound:
                        kind = fault
                        break
            self.counts[(route, kind)] += 1
            self.events.append((route, method, path, kind))
            self.keys.append((route, key))
        return route, kind

    def _opened(self, conn: socket.socket) -> None:
        with self._lock:
            self.connections += 1
            self._open.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.discard(conn)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops the SYNs of a burst of clients: a 1 s retransmit each
    proxy: FaultProxy

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves a host name (getfqdn), which can stall; loopback needs none.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = LOOPBACK, self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away (after a timeout or a reset): nothing to report
        super().handle_error(request, client_address)


class _Upstream:
    """The target's answer, read whole."""

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.reason, self.headers, self.body = status, reason, headers, body


def _connection_tokens(values: Iterable[str]) -> set[str]:
    return {token.strip().lower() for value in values for token in value.split(",") if token.strip()}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.proxy._opened(self.connection)

    def finish(self) -> None:
        self.server.proxy._closed(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _any(self) -> None:
        proxy = self.server.proxy
        try:
            body = self._read_body()
        except ValueError as exc:
            self.send_error(400, str(exc))
            self.close_connection = True
            return
        proxy._request.key = self.headers.get("Idempotency-Key")
        _route, kind = proxy._decide(self.command, self.path, self.headers.get("X-Amz-Target"))
        try:
            if kind == DOWN:
                self._error(503, "ServiceUnavailable", "catalog down (fault proxy)")
            elif kind == "refuse":
                self._error(503, "ServiceUnavailable", "request refused, not forwarded (fault proxy)")
            elif kind == "throttle":
                self._error(429, "TooManyRequests", "throttled, not forwarded (fault proxy)", {"Retry-After": "0"})
            elif kind == "fail_500":  # a server failing at the request itself (not a passing fault)
                self._error(500, "InternalServerError", "the server failed at this request (fault proxy)")
            elif kind == "reset_before":
                self._reset()
            else:
                answer = self._forward(body)
                if answer is None:
                    self._error(502, "BadGateway", f"target 127.0.0.1:{proxy.target_port} did not answer")
                elif kind == "lost":
                    self._error(504, "GatewayTimeout", "forwarded and applied, answer lost (fault proxy)")
                elif kind == "lost_503":  # a gateway that answers 503 after the target applied the request
                    self._error(503, "ServiceUnavailable", "forwarded and applied, then 503 (fault proxy)")
                elif kind == "reset_after":
                    self._reset()
                else:
                    if kind == "slow" and proxy._stopping.wait(proxy.slow_seconds):
                        self.close_connection = True
                        return
                    self._relay(answer)
        except OSError:
            self.close_connection = True  # the client went away (gave up, or a reset of ours)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _any

    def _read_body(self) -> bytes | None:
        """The request body (de-chunked), or None when the request declares none."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(MAX_CHUNK_LINE)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ValueError(f"bad chunk size line {line[:40]!r}") from None
                if size == 0:
                    while self.rfile.readline(MAX_CHUNK_LINE).strip():
                        pass  # trailers
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline(MAX_CHUNK_LINE)
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        try:
            size = int(length)
        except ValueError:
            raise ValueError(f"bad Content-Length {length!r}") from None
        if size < 0:
            raise ValueError(f"bad Content-Length {length!r}")
        return self.rfile.read(size)

    def _forward(self, body: bytes | None) -> _Upstream | None:
        port = self.server.proxy.target_port
        drop = HOP_BY_HOP | _connection_tokens(self.headers.get_all("Connection", [])) | {"host", "content-length"}
        drop |= {"expect"}  # answered here by BaseHTTPRequestHandler
        if body is None and self.command in ("POST", "PUT", "PATCH"):
            body = b""
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=UPSTREAM_TIMEOUT)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", f"{LOOPBACK}:{port}")
            for name, value in self.headers.items():
                if name.lower() not in drop:
                    conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            return _Upstream(response.status, response.reason, response.getheaders(), data)
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def _relay(self, answer: _Upstream) -> None:
        bodiless = self.command == "HEAD" or answer.status in (204, 304) or answer.status < 200
        drop = HOP_BY_HOP | _connection_tokens(v for k, v in answer.headers if k.lower() == "connection")
        if not bodiless:
            drop = drop | {"content-length"}
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.headers:
            if name.lower() not in drop:
                self.send_header(name, value)
        if not bodiless:
            self.send_header("Content-Length", str(len(answer.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not bodiless:
            self.wfile.write(answer.body)

    def _error(self, status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _reset(self) -> None:
        """Close the client connection with an RST (SO_LINGER on, 0), answering nothing."""
        self.close_connection = True
        sock = self.connection
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        # socket.close() would wait for the handler's rfile/wfile to let go of the descriptor; detaching
        # closes it right now, before anything else can be written to it.
        self.server.proxy._closed(sock)
        fd = sock.detach()
        if fd >= 0:
            os.close(fd)
