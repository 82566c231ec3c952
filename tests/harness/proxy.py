"""A TCP proxy on 127.0.0.1 that delays what clients send: a catalog "20 ms away" for tests and benchmarks.

``DelayProxy(target_port, delay_ms=20).start()`` listens on a free loopback port and forwards every
connection to ``127.0.0.1:target_port``. Each chunk a client sends is held ``delay_ms`` before it is
forwarded (in order, per connection), so every HTTP request pays the delay once, as a server that
far away would make it; answers flow back at once. Connections are independent: concurrent requests
overlap their delays, as they would over a real network. It runs an asyncio loop on a daemon thread
of this process and stops with ``stop()`` (or as a context manager). Loopback only: it never
connects anywhere else.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

LOOPBACK = "127.0.0.1"
CHUNK = 1 << 16


class DelayProxy:
    def __init__(self, target_port: int, *, delay_ms: float = 20.0) -> None:
        self.target_port = target_port
        self.delay_ms = delay_ms
        self.port: int | None = None
        self.connections = 0
        self.held = 0  # chunks being delayed right now
        self.max_held = 0  # the most chunks ever delayed at once: > 1 shows connections overlap
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        if self.port is None:
            raise RuntimeError("proxy not started")
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> DelayProxy:
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                self._server = loop.run_until_complete(asyncio.start_server(self._connection, LOOPBACK, 0))
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"delay-proxy-{self.target_port}", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = self._server = None

    def __enter__(self) -> DelayProxy:
        return self.start() if self.port is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(LOOPBACK, self.target_port)
        except OSError:
            client_writer.close()
            return
        upstream = asyncio.ensure_future(self._pump(client_reader, server_writer, self.delay_ms / 1000))
        downstream = asyncio.ensure_future(self._pump(server_reader, client_writer, 0.0))
        try:
            await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # stop(): end quietly (asyncio logs a connection task that ends cancelled)
        finally:
            for task in (upstream, downstream):
                task.cancel()
            for writer in (server_writer, client_writer):
                writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                if delay:
                    self.held += 1
                    self.max_held = max(self.max_held, self.held)
                    try:
                        await asyncio.sleep(delay)
                    finally:
                        self.held -= 1
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                pass
