"""What every test service (site, proxy, Redis) shares: start/stop as a context manager."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    from typing_extensions import Self


class Service:
    """``with Service(...) as running:`` starts it and stops it whatever happens."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class RedisClients:
    """redis-py clients handed to tests, closed when the server they talk to stops."""

    @property
    def url(self) -> str:
        raise NotImplementedError

    def __init__(self) -> None:
        self._clients: list[redis.Redis] = []

    def client(self, **kwargs: Any) -> redis.Redis:
        """A redis-py client of this server (closed by ``stop``); kwargs go to ``from_url``."""
        import redis

        client = redis.Redis.from_url(self.url, **kwargs)
        self._clients.append(client)
        return client

    def _close_clients(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()


def serve_in_thread(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Run ``server.serve_forever`` in a started daemon thread (it never holds up exit)."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
    )
    thread.start()
    return thread
