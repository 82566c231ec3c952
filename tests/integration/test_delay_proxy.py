"""tests/harness/proxy.py: the delaying proxy the REST benchmarks put between a client and the catalog."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time

import pytest

from tests.harness.proxy import DelayProxy

DELAY_MS = 60


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1 << 16):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def echo_port():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def round_trip(port: int, payload: bytes) -> tuple[bytes, float]:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = conn.recv(1 << 16)
            assert chunk, "connection closed early"
            got += chunk
    return got, time.perf_counter() - started


def test_bytes_pass_intact_and_each_request_pays_the_delay(echo_port: int) -> None:
    payload = os.urandom(300_000)
    direct, _ = round_trip(echo_port, b"ping")
    with DelayProxy(echo_port, delay_ms=DELAY_MS) as proxy:
        got, _ = round_trip(proxy.port, payload)
        assert got == payload
        for _ in range(3):
            answer, seconds = round_trip(proxy.port, b"ping")
            assert answer == direct == b"ping"
            assert seconds >= DELAY_MS / 1000


def test_concurrent_connections_overlap_their_delays(echo_port: int) -> None:
    # Structural, not timed: all eight requests are sent before any answer is read, and a delay long
    # enough that sending them cannot outlast it; a proxy serving one connection at a time would never
    # hold more than one chunk.
    with DelayProxy(echo_port, delay_ms=1000) as proxy:
        conns = [socket.create_connection(("127.0.0.1", proxy.port), timeout=10) for _ in range(8)]
        try:
            for i, conn in enumerate(conns):
                conn.sendall(f"n{i}".encode())
            answers = [conn.recv(16) for conn in conns]
        finally:
            for conn in conns:
                conn.close()
        assert answers == [f"n{i}".encode() for i in range(8)]
        assert proxy.connections == 8
        assert proxy.max_held > 1


def test_a_target_that_is_down_closes_the_client_connection() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    with DelayProxy(dead) as proxy, socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as conn:
        conn.sendall(b"hello")
        assert conn.recv(10) == b""


def test_the_counting_proxy_counts_thrift_and_glue_calls_split_across_reads(echo_port: int) -> None:
    """``CountingProxy`` (tests/harness/request_counts.py) finds a Thrift call whose name two reads split (the first
    part echoed back before the second is sent) once, and Glue's ``X-Amz-Target`` per request; bytes pass intact."""
    import struct

    from tests.harness.request_counts import GLUE, THRIFT, CountingProxy

    def call(name: bytes, seqid: int) -> bytes:
        return b"\x80\x01\x00\x01" + struct.pack(">i", len(name)) + name + struct.pack(">i", seqid) + b"\x0c\x00\x01\x00"

    def exchange(sock: socket.socket, data: bytes) -> bytes:
        sock.sendall(data)
        back = b""
        while len(back) < len(data):
            back += sock.recv(1 << 16)
        return back

    with CountingProxy(echo_port, THRIFT) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        first = call(b"get_table", 1)
        sent = [first[:14], first[14:] + call(b"lock", 2), call(b"get_table", 3) + b"\x00" * 300]
        assert b"".join(exchange(sock, part) for part in sent) == b"".join(sent)
        assert proxy.take() == ({"get_table": 2, "lock": 1}, ["get_table", "lock", "get_table"])
    request = (b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AWSGlue.%s\r\nContent-Length: 2\r\n\r\n{}")
    with CountingProxy(echo_port, GLUE) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        for target in (b"GetTable", b"UpdateTable", b"GetTable"):
            exchange(sock, request % target)
        assert dict(proxy.requests) == {"GetTable": 2, "UpdateTable": 1}
