"""A TCP proxy that tests put between one process and Postgres or Redis to inject network faults.

The proxy runs its own event loop in a thread, so it keeps working while the test's loop is
busy and serves subprocesses as well as in-process clients. Faults are switched at run time
and apply to the connections already open as well as to new ones:

- ``blackhole()``: bytes are accepted and never answered, in either direction, and no reset is
  sent: the peer sees a connection that hangs (a partition, a dead router). ``heal()`` lets
  the held bytes through, as TCP would after retransmission.
- ``latency(seconds)``: every chunk is delivered that much later (order kept), both ways.
- ``bandwidth(bytes_per_s)``: each direction of each connection is throttled to that rate.
- ``reset()``: every open connection is torn down with a TCP RST; ``refuse(True)`` resets new
  connections as they arrive (a server that is down, a firewall rejecting).

Why not toxiproxy: it is a Go server to install and drive over HTTP; the faults these tests
need fit in one small module that runs wherever the tests do.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

CHUNK = 64 * 1024


@dataclass
class _Faults:
    blackholed: bool = False
    latency_s: float = 0.0
    bytes_per_s: float | None = None
    refusing: bool = False


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    """Listens on a free port of ``listen_host`` (loopback unless told) and forwards to
    ``upstream_host:upstream_port``."""

    def __init__(
        self, upstream_host: str, upstream_port: int, listen_host: str = "127.0.0.1"
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.listen_host = listen_host
        self.port = 0
        self.connections_accepted = 0
        self._faults = _Faults()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._healed: asyncio.Event | None = None

    # --- control (thread-safe: called from the test) ------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def blackhole(self) -> None:
        self._call(self._set(blackholed=True))

    def latency(self, seconds: float) -> None:
        self._call(self._set(latency_s=seconds))

    def bandwidth(self, bytes_per_s: float | None) -> None:
        self._call(self._set(bytes_per_s=bytes_per_s))

    def refuse(self, refusing: bool = True) -> None:
        self._call(self._set(refusing=refusing))

    def heal(self) -> None:
        """No fault any more; bytes held by a black hole are delivered now."""
        self._call(self._set(blackholed=False, latency_s=0.0, bytes_per_s=None, refusing=False))

    def reset(self) -> None:
        """Tear down every open connection with a TCP RST."""
        self._call(self._reset_all())

    def url(self, url: str) -> str:
        """``url`` (postgresql:// or redis://) pointed at this proxy instead of its server."""
        parts = urlsplit(url)
        auth = parts.netloc.rpartition("@")[0]
        where = f"{self.listen_host}:{self.port}"
        netloc = f"{auth}@{where}" if auth else where
        return urlunsplit(parts._replace(netloc=netloc))

    @property
    def open_connections(self) -> int:
        return len(self._links)

    def _call(self, coro: object) -> None:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        future.result(timeout=10)

    # --- the proxy's own loop ------------------------------------------------------------------

    async def _set(self, **changes: object) -> None:
        for name, value in changes.items():
            setattr(self._faults, name, value)
        assert self._healed is not None
        if self._faults.blackholed:
            self._healed.clear()
        else:
            self._healed.set()

    async def _listen(self) -> None:
        self._healed = asyncio.Event()
        self._healed.set()
        self._server = await asyncio.start_server(self._accept, self.listen_host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._reset_all()

    async def _reset_all(self) -> None:
        for link in list(self._links):
            _abort(link.client)
            if link.upstream is not None:
                _abort(link.upstream)
            for task in link.tasks:
                task.cancel()
        self._links.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        if self._faults.refusing:
            _abort(writer)
            return
        link = _Link(client=writer)
        self._links.add(link)
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError:
            self._links.discard(link)
            _abort(writer)
            return
        link.upstream = up_writer
        link.tasks = [
            asyncio.ensure_future(self._pipe(reader, up_writer, link)),
            asyncio.ensure_future(self._pipe(up_reader, writer, link)),
        ]

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: _Link
    ) -> None:
        """Read from ``source`` and deliver to ``sink`` under the current faults (order kept:
        a chunk is delivered only after every chunk read before it)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliver = asyncio.ensure_future(self._deliver(queue, sink))
        try:
            while data := await source.read(CHUNK):
                await queue.put((time.monotonic() + self._faults.latency_s, data))
            await queue.put((0.0, b""))
            await deliver
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            deliver.cancel()
            self._close(link)

    async def _deliver(
        self, queue: asyncio.Queue[tuple[float, bytes]], sink: asyncio.StreamWriter
    ) -> None:
        assert self._healed is not None
        while True:
            due, data = await queue.get()
            if not data:
                with contextlib.suppress(OSError):
                    sink.write_eof()
                return
            await self._healed.wait()  # a black hole holds everything
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            rate = self._faults.bytes_per_s
            if rate:
                await asyncio.sleep(len(data) / rate)
            await self._healed.wait()
            sink.write(data)
            await sink.drain()

    def _close(self, link: _Link) -> None:
        if link not in self._links:
            return
        self._links.discard(link)
        for writer in (link.client, link.upstream):
            if writer is not None:
                writer.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@contextlib.contextmanager
def fault_proxy(url: str, listen_host: str = "127.0.0.1") -> Iterator[FaultProxy]:
    """A running proxy in front of the server of ``url`` (postgresql:// or redis://)."""
    parts = urlsplit(url)
    default_port = 6379 if parts.scheme.startswith("redis") else 5432
    upstream = (parts.hostname or "127.0.0.1", parts.port or default_port)
    proxy = FaultProxy(*upstream, listen_host=listen_host).start()
    try:
        yield proxy
    finally:
        proxy.stop()


__all__ = ["FaultProxy", "fault_proxy"]
