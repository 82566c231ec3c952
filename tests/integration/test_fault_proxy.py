"""tests/harness/fault_proxy.py: the fault-injecting HTTP proxy put between pyiceberg and a REST catalog.

The target is a small keep-alive HTTP/1.1 server in this file that records every request it receives
and echoes it back (method and path in headers, the body as the body, an ETag on GET), so each test can
tell what the proxy forwarded from what it made up. Clients are keep-alive ``requests`` sessions, as
pyiceberg's are.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from tests.harness.fault_proxy import FAULTS, FaultProxy, route_of

COMMIT = "/v1/namespaces/demo/tables/words"
LOAD = "/v1/namespaces/demo/tables/words"
CONFIG = "/v1/config"


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    header_names: list[str]
    body: bytes


@dataclass
class Target:
    port: int = 0
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.received)


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: EchoServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        with self.server.target.lock:
            self.server.target.received.append(
                Received(self.command, self.path, dict(self.headers.items()), list(self.headers.keys()), body)
            )
        path = self.path.split("?", 1)[0]
        etag = '"' + hashlib.sha256(self.path.encode()).hexdigest()[:16] + '"'
        answer = body if body else f"{self.command} {self.path}".encode()
        status = int(path.rsplit("/", 1)[1]) if path.startswith("/status/") else 200
        if self.command == "GET" and self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        self.send_response(status)
        self.send_header("X-Echo-Method", self.command)
        self.send_header("X-Echo-Path", self.path)
        self.send_header("Keep-Alive", "timeout=30")  # hop-by-hop: the proxy must not pass it on
        if self.command in ("GET", "HEAD"):
            self.send_header("ETag", etag)
        if path == "/chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command != "HEAD":
                for piece in (answer[:5], answer[5:]):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    target: Target

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]


@pytest.fixture
def target() -> Iterator[Target]:
    server = EchoServer(("127.0.0.1", 0), EchoHandler)
    server.target = Target(port=server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.target
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy_for(target: Target) -> Iterator[Callable[..., FaultProxy]]:
    started: list[FaultProxy] = []

    def make(**kwargs: Any) -> FaultProxy:
        proxy = FaultProxy(target.port, **kwargs).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.trust_env = False  # no HTTP(S)_PROXY from the environment between us and 127.0.0.1
        yield s


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def reset_in(exc: BaseException) -> bool:
    """Whether an ECONNRESET is among the exceptions requests and urllib3 wrapped up.

    Not just any ConnectionResetError: http.client's RemoteDisconnected (an orderly close, no answer)
    is one too, without an errno.
    """
    todo, seen = [exc], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ECONNRESET:
            return True
        todo.extend(arg for arg in current.args if isinstance(arg, BaseException))
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def error_of(response: requests.Response) -> dict[str, Any]:
    assert response.headers["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"} and error["code"] == response.status_code
    assert isinstance(error["message"], str) and error["message"]
    return error


@pytest.mark.parametrize(
    ("method", "path", "route"),
    [
        ("POST", "/v1/namespaces/demo/tables/words", "commit"),
        ("POST", "/v1/myprefix/namespaces/a%1Fb/tables/t", "commit"),
        ("POST", "/catalog/v1/my%2Fprefix/namespaces/demo/tables/words", "commit"),
        ("POST", "/v1/transactions/commit", "commit"),
        ("POST", "/v1/myprefix/transactions/commit", "commit"),
        ("post", "/v1/namespaces/demo/tables/metrics", "commit"),  # a table named "metrics"
        ("GET", "/v1/namespaces/demo/tables/words", "load"),
        ("GET", "/v1/myprefix/namespaces/a%1Fb/tables/t?snapshots=all", "load"),
        ("POST", "/v1/namespaces/demo/tables", "other"),  # create
        ("POST", "/v1/myprefix/namespaces/demo/tables", "other"),
        ("GET", "/v1/namespaces/demo/tables", "other"),  # list
        ("POST", "/v1/namespaces/demo/tables/t/metrics", "other"),
        ("POST", "/v1/namespaces/demo/tables/t/plan", "other"),
        ("GET", "/v1/namespaces/demo/tables/t/credentials", "other"),
        ("POST", "/v1/namespaces/demo/register", "other"),
        ("POST", "/v1/tables/rename", "other"),
        ("HEAD", "/v1/namespaces/demo/tables/words", "other"),  # exists
        ("DELETE", "/v1/namespaces/demo/tables/words", "other"),  # drop
        ("GET", "/v1/transactions/commit", "other"),
        ("POST", "/v1/namespaces/demo/views/v", "other"),
        ("GET", "/v1/config?warehouse=w", "other"),
        ("POST", "/v1/namespaces", "other"),
        ("POST", "/v1/namespaces/demo/tables/", "other"),
    ],
)
def test_route_of_real_iceberg_rest_paths(method: str, path: str, route: str) -> None:
    assert route_of(method, path) == route


def test_pass_through_keeps_bodies_statuses_headers_and_queries_on_one_keep_alive_session(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for()
    big = os.urandom(300_000)
    answer = session.post(proxy.uri + "/v1/namespaces/demo/tables/words", data=big, timeout=10)
    assert answer.status_code == 200 and answer.content == big
    assert int(answer.headers["Content-Length"]) == len(big)
    assert target.received[-1].body == big and target.received[-1].method == "POST"

    answer = session.get(proxy.uri + "/v1/config?warehouse=a%20b&x=1", timeout=10)
    assert answer.status_code == 200
    assert target.received[-1].path == "/v1/config?warehouse=a%20b&x=1"
    assert answer.headers["X-Echo-Path"] == "/v1/config?warehouse=a%20b&x=1"
    assert answer.content == b"GET /v1/config?warehouse=a%20b&x=1"

    missing = session.post(proxy.uri + "/status/404", data=b"nope", timeout=10)
    assert missing.status_code == 404 and missing.content == b"nope"
    assert missing.headers["X-Echo-Method"] == "POST"

    first = session.get(proxy.uri + LOAD, headers={"X-Custom": "kept"}, timeout=10)
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith('"')
    assert target.received[-1].headers["X-Custom"] == "kept"
    assert target.received[-1].headers["Host"] == f"127.0.0.1:{target.port}"
    assert "Connection" not in target.received[-1].headers  # requests' "Connection: keep-alive" is hop-by-hop
    assert "Keep-Alive" not in first.headers  # so is the target's Keep-Alive
    not_modified = session.get(proxy.uri + LOAD, headers={"If-None-Match": etag}, timeout=10)
    assert not_modified.status_code == 304 and not_modified.content == b""
    assert not_modified.headers["ETag"] == etag
    assert target.received[-1].headers["If-None-Match"] == etag

    # A header the client names in Connection is hop-by-hop too.
    session.get(proxy.uri + CONFIG, headers={"Connection": "keep-alive, X-Hop", "X-Hop": "1"}, timeout=10)
    assert "X-Hop" not in target.received[-1].header_names

    # A chunked answer from the target goes out with its own, correct Content-Length.
    chunked = session.post(proxy.uri + "/chunked", data=b"0123456789abcdef", timeout=10)
    assert chunked.content == b"0123456789abcdef" and chunked.headers["Content-Length"] == "16"
    assert "Transfer-Encoding" not in chunked.headers

    # HEAD: the target's Content-Length, no body (a body here would break the next request on the session).
    head = session.head(proxy.uri + "/v1/some/thing", timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Length"] == str(len(b"HEAD /v1/some/thing"))
    for method in ("PUT", "DELETE"):
        answer = session.request(method, proxy.uri + "/v1/namespaces/demo", data=method.encode(), timeout=10)
        assert answer.status_code == 200 and answer.content == method.encode()
        assert target.received[-1].method == method

    assert target.count == 10
    assert proxy.connections == 1  # all of it on one kept-alive connection
    assert sum(proxy.counts.values()) == 10 and all(kind == "pass" for _, kind in proxy.counts)
    assert [event[1:3] for event in proxy.events][:2] == [("POST", COMMIT), ("GET", "/v1/config?warehouse=a%20b&x=1")]


def test_concurrent_keep_alive_clients(target: Target, proxy_for: Callable[..., FaultProxy]) -> None:
    proxy = proxy_for()
    failures: list[str] = []

    def client(n: int) -> None:
        with requests.Session() as s:
            s.trust_env = False
            for i in range(15):
                body = f"client {n} request {i}".encode() * (n + 1)
                answer = s.post(proxy.uri + f"/v1/namespaces/c{n}/tables/t{i}", data=body, timeout=10)
                if answer.status_code != 200 or answer.content != body:
                    failures.append(f"{n}/{i}: {answer.status_code} {answer.content[:40]!r}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    assert target.count == 120
    assert proxy.counts == {("commit", "pass"): 120}
    assert proxy.connections == 8


def test_lost_applies_then_answers_504(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"commit": {"lost": 1.0}})
    answer = session.post(proxy.uri + COMMIT, data=b'{"updates": []}', timeout=10)
    assert answer.status_code == 504
    assert error_of(answer)["type"] == "GatewayTimeout"
    assert target.count == 1 and target.received[0].body == b'{"updates": []}'
    assert proxy.counts[("commit", "lost")] == 1


def test_refuse_answers_503_without_forwarding(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"commit": {"refuse": 1.0}})
    for _ in range(2):  # the body was consumed: the kept-alive connection stays in step
        answer = session.post(proxy.uri + COMMIT, data=b"x" * 1000, timeout=10)
        assert answer.status_code == 503
        assert error_of(answer)["type"] == "ServiceUnavailable"
    assert target.count == 0
    assert session.get(proxy.uri + LOAD, timeout=10).status_code == 200
    assert target.count == 1 and proxy.connections == 1


def test_throttle_answers_429_with_retry_after(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"load": {"throttle": 1.0}})
    answer = session.get(proxy.uri + LOAD, timeout=10)
    assert answer.status_code == 429 and answer.headers["Retry-After"] == "0"
    assert error_of(answer)["code"] == 429
    assert target.count == 0
    assert proxy.counts == {("load", "throttle"): 1}


def test_slow_answer_outlasts_the_client_timeout_after_the_target_applied_it(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"commit": {"slow": 1.0}}, slow_seconds=1.0)
    with pytest.raises(requests.exceptions.ReadTimeout):
        session.post(proxy.uri + COMMIT, data=b"slow", timeout=0.3)
    assert wait_for(lambda: target.count == 1)  # forwarded before the hold
    assert target.received[0].body == b"slow"
    proxy.set_rules({})
    answer = session.get(proxy.uri + LOAD, timeout=10)  # the session goes on (on a new connection)
    assert answer.status_code == 200 and target.count == 2
    assert [event[3] for event in proxy.events] == ["slow", "pass"]


@pytest.mark.parametrize(("kind", "forwarded"), [("reset_before", 0), ("reset_after", 1)])
def test_resets_drop_the_connection_and_the_session_goes_on(
    kind: str, forwarded: int, target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"commit": {kind: 1.0}})
    assert session.get(proxy.uri + CONFIG, timeout=10).status_code == 200  # a kept-alive connection first
    before = target.count
    with pytest.raises(requests.exceptions.ConnectionError) as raised:
        session.post(proxy.uri + COMMIT, data=b"reset me", timeout=10)
    assert reset_in(raised.value)  # an RST, not an orderly close
    assert target.count - before == forwarded
    if forwarded:
        assert target.received[-1].body == b"reset me"
    answer = session.get(proxy.uri + LOAD, timeout=10)
    assert answer.status_code == 200 and answer.content == b"GET " + LOAD.encode()
    assert proxy.connections == 2
    assert [event[3] for event in proxy.events] == ["pass", kind, "pass"]


def test_rules_apply_per_route_and_can_change_while_running(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"commit": {"refuse": 1.0}})
    assert session.post(proxy.uri + COMMIT, data=b"{}", timeout=10).status_code == 503
    assert session.post(proxy.uri + "/v1/prefix/transactions/commit", data=b"{}", timeout=10).status_code == 503
    assert session.get(proxy.uri + LOAD, timeout=10).status_code == 200
    assert session.post(proxy.uri + "/v1/namespaces/demo/tables", data=b"{}", timeout=10).status_code == 200
    assert session.post(proxy.uri + "/v1/namespaces/demo/tables/words/metrics", timeout=10).status_code == 200
    assert target.count == 3
    assert proxy.counts == {("commit", "refuse"): 2, ("load", "pass"): 1, ("other", "pass"): 2}

    proxy.set_rules({"load": {"throttle": 1.0}})
    assert session.get(proxy.uri + LOAD, timeout=10).status_code == 429
    assert session.post(proxy.uri + COMMIT, data=b"{}", timeout=10).status_code == 200
    assert target.count == 4
    with pytest.raises(ValueError, match="unknown route"):
        proxy.set_rules({"commits": {"refuse": 1.0}})
    assert session.get(proxy.uri + LOAD, timeout=10).status_code == 429  # a rejected set_rules changed nothing


def test_keys_are_recorded_each_key_s_first_answer_lost_and_scripts_come_first(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(lose_first_of_each_key=True)
    k1, k2 = {"Idempotency-Key": "k1"}, {"Idempotency-Key": "k2"}
    statuses = [session.post(proxy.uri + COMMIT, data=b"{}", headers=h, timeout=10).status_code
                for h in (k1, k1, k2, {}, k1)]
    assert statuses == [504, 200, 504, 200, 200]  # a commit without a key is never lost by this
    assert target.count == 5  # "lost" forwards: the target applied each one
    assert proxy.keys == [("commit", "k1"), ("commit", "k1"), ("commit", "k2"), ("commit", None), ("commit", "k1")]
    assert target.received[0].headers.get("Idempotency-Key") == "k1"  # forwarded as sent
    proxy.script("commit", "refuse", "pass")
    statuses = [session.post(proxy.uri + COMMIT, data=b"{}", headers=h, timeout=10).status_code for h in (k2, {"Idempotency-Key": "k3"})]
    assert statuses == [503, 200]  # the script before the key rule: k3's first answer passed
    assert session.get(proxy.uri + LOAD, headers=k1, timeout=10).status_code == 200  # loads are never lost by it
    with pytest.raises(ValueError, match="unknown fault kind"):
        proxy.script("commit", "vanish")


def test_down_answers_503_to_everything_until_up(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(rules={"commit": {"lost": 1.0}})
    proxy.down()
    assert proxy.is_down
    for method, path in (("GET", CONFIG), ("GET", LOAD), ("POST", COMMIT)):
        answer = session.request(method, proxy.uri + path, data=b"{}" if method == "POST" else None, timeout=10)
        assert answer.status_code == 503 and error_of(answer)["type"] == "ServiceUnavailable"
    assert target.count == 0
    proxy.up()
    assert session.get(proxy.uri + LOAD, timeout=10).status_code == 200
    assert session.post(proxy.uri + COMMIT, data=b"{}", timeout=10).status_code == 504  # the rules again
    assert target.count == 2
    assert [event[3] for event in proxy.events] == ["down", "down", "down", "pass", "lost"]


def kinds_for(proxy: FaultProxy, session: requests.Session, n: int) -> list[str]:
    for i in range(n):
        method, path = [("POST", COMMIT), ("GET", LOAD), ("GET", CONFIG)][i % 3]
        try:
            session.request(method, proxy.uri + path, data=b"{}" if method == "POST" else None, timeout=10)
        except requests.exceptions.ConnectionError:
            pass
    assert len(proxy.events) == n
    return [event[3] for event in proxy.events]


MIXED_RULES = {
    "commit": {"lost": 0.15, "refuse": 0.15, "throttle": 0.1, "reset_before": 0.1, "reset_after": 0.1},
    "load": {"refuse": 0.3, "throttle": 0.2},
    "other": {"throttle": 0.1},
}


def test_a_seed_gives_the_same_decisions(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    first = kinds_for(proxy_for(seed=11, rules=MIXED_RULES), session, 200)
    # The same rules written in another order draw the same faults.
    reordered = {route: dict(reversed(list(kinds.items()))) for route, kinds in reversed(list(MIXED_RULES.items()))}
    second = kinds_for(proxy_for(seed=11, rules=reordered), session, 200)
    other_seed = kinds_for(proxy_for(seed=12, rules=MIXED_RULES), session, 200)
    assert first == second
    assert first != other_seed
    assert {"lost", "refuse", "throttle", "reset_before", "reset_after", "pass"} <= set(first)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fault_rate_over_400_commits(
    seed: int, target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    proxy = proxy_for(seed=seed, rules={"commit": {"refuse": 0.25}})
    for _ in range(400):
        session.post(proxy.uri + COMMIT, data=b"{}", timeout=10)
    assert 60 <= proxy.counts[("commit", "refuse")] <= 140
    assert proxy.counts[("commit", "refuse")] + proxy.counts[("commit", "pass")] == 400
    assert target.count == proxy.counts[("commit", "pass")]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"commits": {"lost": 0.1}}, "unknown route 'commits'"),
        ({"commit": {"timeout": 0.1}}, "unknown fault kind 'timeout'"),
        ({"load": {"refuse": -0.1}}, "must be >= 0"),
        ({"load": {"refuse": float("nan")}}, "must be >= 0"),
        ({"load": {"refuse": "0.5"}}, "not a number"),
        ({"commit": {"lost": 0.6, "refuse": 0.5}}, "sum to 1.1 > 1"),
    ],
)
def test_invalid_rules_raise(rules: dict[str, dict[str, Any]], message: str, target: Target) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        FaultProxy(target.port, rules=rules)


def test_valid_edge_rules_are_accepted(target: Target) -> None:
    FaultProxy(target.port, rules={"commit": {kind: 1 / len(FAULTS) for kind in FAULTS}, "other": {}})
    FaultProxy(target.port, rules={"load": {"refuse": 1.0, "lost": 0.0}})
    with pytest.raises(ValueError, match="slow_seconds"):
        FaultProxy(target.port, slow_seconds=-1)


def test_stop_closes_kept_alive_connections_and_the_port(
    target: Target, proxy_for: Callable[..., FaultProxy], session: requests.Session
) -> None:
    with FaultProxy(target.port, rules={"commit": {"slow": 1.0}}, slow_seconds=30) as proxy:
        uri = proxy.uri
        assert session.get(uri + CONFIG, timeout=10).status_code == 200
        held: list[BaseException] = []

        def held_commit() -> None:
            with requests.Session() as other:
                other.trust_env = False
                try:
                    other.post(uri + COMMIT, data=b"{}", timeout=30)
                except requests.exceptions.RequestException as exc:
                    held.append(exc)

        thread = threading.Thread(target=held_commit)
        thread.start()
        assert wait_for(lambda: target.count == 2)  # forwarded, now held for 30 s
    thread.join(10)
    assert not thread.is_alive()  # stop() cut the hold short and closed the connection
    assert len(held) == 1 and isinstance(held[0], requests.exceptions.ConnectionError)
    with pytest.raises(requests.exceptions.ConnectionError):
        session.get(uri + CONFIG, timeout=10)
    proxy.stop()  # twice is fine
    assert proxy.counts == {("other", "pass"): 1, ("commit", "slow"): 1}
