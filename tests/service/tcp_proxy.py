"""A TCP proxy that can be cut and restored: a database outage without stopping the shared
PostgreSQL server; and slowed: `delay_s` holds every chunk it forwards, each way, that long
(a slow database or network: every query's round trip then takes at least twice that). Used
by the worker tests, the admission tests and scripts/load_stack.py, scripts/admission_load.py.

`cut()` closes the listening socket (new connections are refused, as by a stopped server)
and aborts every open connection (clients see the server close them); `restore()` listens
again on the same port. The proxy runs an asyncio loop in a daemon thread of the caller's
process; every method is thread-safe and blocks until done.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

from sqlalchemy.engine import make_url


class CuttableProxy:
    """Forward ``listen_host:listen_port`` (default: a free loopback port) to
    ``target_host:target_port``.

    Raises:
        OSError: from `start` or `restore` when the listening port cannot be bound.
    """

    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.listen_port = listen_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy",
                                        daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections_total = 0
        #: Seconds each forwarded chunk is held before it is written (0: none). Set it from any
        #: thread; it applies to the chunks forwarded from then on.
        self.delay_s = 0.0

    # ----------------------------------------------------------------- public, thread-safe

    def start(self) -> CuttableProxy:
        """Start listening; returns self (``listen_port`` is then the bound port)."""
        self._thread.start()
        self._call(self._listen())
        return self

    def cut(self) -> None:
        """Refuse new connections and abort the open ones."""
        self._call(self._cut())

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        self._call(self._listen())

    @property
    def is_cut(self) -> bool:
        """True between `cut()` and `restore()`."""
        return self._server is None

    def close(self) -> None:
        """Cut and stop the proxy's thread."""
        if self._thread.is_alive():
            self.cut()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def url_for(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by the proxy's."""
        return make_url(database_url).set(host=self.listen_host, port=self.listen_port) \
            .render_as_string(hide_password=False)

    @classmethod
    def for_database(cls, database_url: str) -> CuttableProxy:
        """A started proxy in front of the server of `database_url` (PostgreSQL)."""
        url = make_url(database_url)
        return cls(url.host or "127.0.0.1", url.port or 5432).start()

    # ----------------------------------------------------------------- loop side

    def _call(self, coroutine) -> None:  # noqa: ANN001 - a coroutine object
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._handle, self.listen_host, self.listen_port, reuse_address=True,
            family=socket.AF_INET,
        )
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            # Since 3.12 wait_closed() also waits for the connections; aborting them first.
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _handle(self, client_reader: asyncio.StreamReader,
                      client_writer: asyncio.StreamWriter) -> None:
        if self._server is None:
            client_writer.transport.abort()
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(
                self.target_host, self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        self.connections_total += 1
        self._writers.update((client_writer, server_writer))
        try:
            await asyncio.gather(self._pipe(client_reader, server_writer),
                                 self._pipe(server_reader, client_writer))
        finally:
            for writer in (client_writer, server_writer):
                self._writers.discard(writer)
                writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.delay_s > 0:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()


@contextlib.contextmanager
def cuttable_proxy(database_url: str) -> Iterator[CuttableProxy]:
    """`CuttableProxy.for_database` for the length of a ``with`` block."""
    proxy = CuttableProxy.for_database(database_url)
    try:
        yield proxy
    finally:
        proxy.close()
