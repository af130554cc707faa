"""A TCP proxy on 127.0.0.1 that adds latency and simulates network cuts.

Put it between the crawler nodes and Redis: `TcpProxy(target_host, target_port, delay_s=0.0025)`
adds 2.5 ms in each direction (5 ms per round trip). `cut` drops every connection and refuses
new ones (or, with ``blackhole=True``, swallows all traffic so clients time out); `restore`
forwards again. `retarget` sends new connections to another server (a DNS or VIP move).

One asyncio event loop in a background thread carries every connection. Each chunk read is
delivered at ``arrival time + delay_s`` through a per-direction FIFO, so bytes keep their order
even when ``delay_s`` changes mid-stream, pipelined traffic is not slowed down per chunk, and
independent connections never wait on each other. The loop uses ``select()`` for its
microsecond timer precision, which limits the proxy's process to file descriptors below 1024.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import threading
from collections import deque
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._service import Service
from .redis_server import redis_url

__all__ = ["TcpProxy"]

LOCALHOST = "127.0.0.1"
_LISTEN_BACKLOG = 1024
_START_TIMEOUT_S = 10.0

_T = TypeVar("_T")


class TcpProxy(Service):
    """Forwards TCP connections from ``127.0.0.1:port`` to ``target_host:target_port``.

    ``delay_s`` may be changed at any time from any thread; it applies to data arriving after
    the change. All public methods are thread-safe and return once the change is in effect.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        delay_s: float = 0.0,
        listen_port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = listen_port
        self.mode = "forward"  # "forward" | "refuse" | "blackhole"
        self.connections_accepted = 0
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    def url(self, db: int = 0, password: str | None = None) -> str:
        """``redis://[:password@]127.0.0.1:PORT/db`` pointing at the proxy."""
        return redis_url(self.port, db=db, password=password)

    @property
    def is_cut(self) -> bool:
        return self.mode != "forward"

    def active_connections(self) -> int:
        """Number of client connections currently open through the proxy."""
        return len(self._links)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        """Listen on 127.0.0.1 and forward in a background thread; returns self when ready."""
        if self._thread is not None:
            raise RuntimeError("TcpProxy already started")
        # select() sleeps with microsecond precision; epoll/poll round every timer up to the
        # next millisecond, which would add up to 1 ms to each delayed chunk.
        loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"TcpProxy->{self.target_port}", daemon=True
        )
        self._thread.start()
        server = self._call(
            loop.create_server(
                lambda: _ClientSide(self), LOCALHOST, self.port, backlog=_LISTEN_BACKLOG
            )
        )
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and end the loop thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._call(self._shutdown())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
        self._loop = self._thread = self._server = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._close_links()
        if self._server is not None:
            await self._server.wait_closed()

    # -- faults -----------------------------------------------------------------------------

    def cut(self, blackhole: bool = False) -> None:
        """Simulate a network cut until `restore`.

        Default: close every current connection and close new ones right after accepting them
        (clients get connection errors at once). ``blackhole=True``: keep connections open but
        drop all bytes both ways and forward nothing for new ones (clients time out).
        """
        self._call(self._set_mode("blackhole" if blackhole else "refuse"))

    def retarget(self, host: str, port: int) -> None:
        """Forward new connections to ``host:port``, like a DNS name or virtual IP that moves
        to another server; connections already open stay linked to the old target."""
        self._call(self._set_target(host, port))

    async def _set_target(self, host: str, port: int) -> None:
        self.target_host, self.target_port = host, port

    def restore(self) -> None:
        """Forward new connections again. Connections that were blackholed are closed,
        since the bytes they lost would leave their streams corrupt."""
        self._call(self._set_mode("forward"))

    async def _set_mode(self, mode: str) -> None:
        previous, self.mode = self.mode, mode
        if mode == "refuse" or (mode == "forward" and previous == "blackhole"):
            self._close_links()

    def _close_links(self) -> None:
        for link in list(self._links):
            link.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the proxy's loop and wait for its result."""
        if self._loop is None:
            coro.close()
            raise RuntimeError("TcpProxy is not started")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=_START_TIMEOUT_S)

    def __repr__(self) -> str:
        return (
            f"TcpProxy(127.0.0.1:{self.port} -> {self.target_host}:{self.target_port}, "
            f"delay_s={self.delay_s}, mode={self.mode})"
        )


class _Link:
    """One proxied connection: a client-side and a target-side transport, two pipes."""

    def __init__(self, proxy: TcpProxy, client: asyncio.Transport) -> None:
        self.proxy = proxy
        self.client = client
        self.target: asyncio.Transport | None = None
        self.closed = False
        self.to_target = _DelayedPipe(proxy, self)
        self.to_client = _DelayedPipe(proxy, self)
        self.to_client.connect(client)

    def close(self) -> None:
        """Abort both sides now (pending delayed bytes are dropped, like a cut cable)."""
        if self.closed:
            return
        self.closed = True
        self.proxy._links.discard(self)
        self.to_target.cancel()
        self.to_client.cancel()
        self.client.abort()
        if self.target is not None:
            self.target.abort()

    def pipe_finished(self) -> None:
        """A pipe has passed its EOF on; once both have, close both sides."""
        if self.to_target.finished and self.to_client.finished and not self.closed:
            self.closed = True
            self.proxy._links.discard(self)
            self.client.close()
            if self.target is not None:
                self.target.close()


class _DelayedPipe:
    """One direction of a link: delivers each chunk at its arrival time + the proxy's delay.

    An EOF from the source is passed on (``write_eof``) after the bytes before it.
    """

    def __init__(self, proxy: TcpProxy, link: _Link) -> None:
        self.proxy = proxy
        self.link = link
        self.sink: asyncio.Transport | None = None
        self.finished = False
        self._eof_received = False
        self._pending: deque[tuple[float, bytes]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def connect(self, sink: asyncio.Transport) -> None:
        """Start delivering to ``sink`` (what arrived before this waits for it)."""
        self.sink = sink
        self._schedule()
        self._finish_if_drained()

    def send(self, data: bytes) -> None:
        """Queue ``data`` for delivery; bytes leave in the order they arrived."""
        if self.proxy.mode == "blackhole" or self.link.closed:
            return
        delay = self.proxy.delay_s
        if delay <= 0 and not self._pending and self.sink is not None:
            self.sink.write(data)
            return
        loop = asyncio.get_running_loop()
        self._pending.append((loop.time() + max(delay, 0.0), data))
        self._schedule()

    def eof(self) -> None:
        """The source half-closed: pass the EOF on once everything before it is delivered."""
        self._eof_received = True
        self._finish_if_drained()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending.clear()

    def _schedule(self) -> None:
        if self._timer is None and self._pending and self.sink is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(self._pending[0][0], self._flush)

    def _flush(self) -> None:
        self._timer = None
        if self.sink is None or self.link.closed:
            return
        now = asyncio.get_running_loop().time()
        while self._pending and self._pending[0][0] <= now:
            self.sink.write(self._pending.popleft()[1])
        self._schedule()
        self._finish_if_drained()

    def _finish_if_drained(self) -> None:
        if not self._eof_received or self.finished or self._pending or self.sink is None:
            return
        self.finished = True
        if self.sink.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                self.sink.write_eof()
        self.link.pipe_finished()


class _ClientSide(asyncio.Protocol):
    """Accepted connection: opens the target connection and feeds the client->target pipe."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.link: _Link | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.proxy.connections_accepted += 1
        if self.proxy.mode == "refuse":
            transport.abort()
            return
        link = _Link(self.proxy, transport)
        self.link = link
        self.proxy._links.add(link)
        if self.proxy.mode == "forward":
            asyncio.get_running_loop().create_task(self._connect_target(link))

    async def _connect_target(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(
                lambda: _TargetSide(link), self.proxy.target_host, self.proxy.target_port
            )
        except OSError:
            link.close()
            return
        if link.closed:
            transport.abort()
            return
        link.target = transport
        link.to_target.connect(transport)

    def data_received(self, data: bytes) -> None:
        if self.link is not None:
            self.link.to_target.send(data)

    def eof_received(self) -> bool:
        if self.link is not None:
            self.link.to_target.eof()
        return True  # keep our write side open: replies may still be on their way

    def connection_lost(self, exc: Exception | None) -> None:
        if self.link is not None:
            self.link.close()

    def pause_writing(self) -> None:
        if self.link is not None and self.link.target is not None:
            self.link.target.pause_reading()

    def resume_writing(self) -> None:
        if self.link is not None and self.link.target is not None:
            self.link.target.resume_reading()


class _TargetSide(asyncio.Protocol):
    """Connection to the target: feeds the target->client pipe."""

    def __init__(self, link: _Link) -> None:
        self.link = link

    def data_received(self, data: bytes) -> None:
        self.link.to_client.send(data)

    def eof_received(self) -> bool:
        self.link.to_client.eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()

    def pause_writing(self) -> None:
        self.link.client.pause_reading()

    def resume_writing(self) -> None:
        self.link.client.resume_reading()
