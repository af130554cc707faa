"""HeldRequests: the requests that wait at the download gate (download_gate.py), in the order they
go: priority (highest first), then arrival."""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.utils.asyncio import is_asyncio_available
from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy import Request


@dataclass(eq=False)
class Held:
    """One request waiting at the gate for its site's turn (``key``: its download slot).

    ``turn`` ends with None when the request may go on to the downloader, or with the request
    itself when it is handed back to the job's queue instead (download_gate.py): an
    ``asyncio.Future`` when the reactor runs on asyncio (the downloader middlewares await it as
    it is), else a ``Deferred``.
    """

    order: tuple[int, int]
    request: Request
    key: str
    turn: asyncio.Future[Request | None] | Deferred[Request | None]

    def go(self, answer: Request | None) -> None:
        """End ``turn`` with ``answer`` (None: go on; the request: handed back)."""
        turn = self.turn
        if isinstance(turn, Deferred):
            turn.callback(answer)
        elif not turn.done():  # (cancelled: nobody waits for it any more)
            turn.set_result(answer)


class HeldRequests:
    """The held requests, kept sorted; there are at most ``CONCURRENT_REQUESTS`` of them (the
    engine counts them as downloads under way), so a walk over all of them is cheap."""

    def __init__(self) -> None:
        #: the held requests, in order (its truth says whether any is held, at no call)
        self.waiting: list[Held] = []
        self._arrivals = itertools.count()
        #: held requests per download slot
        self.per_slot: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_asyncio: bool | None = None  # known at the first hold (the reactor is set)

    def __len__(self) -> int:
        return len(self.waiting)

    def __iter__(self) -> Iterator[Held]:
        """The held requests in order, over a copy: ``remove`` may be called meanwhile."""
        return iter(list(self.waiting))

    def add(self, request: Request, key: str) -> Held:
        """Hold ``request`` behind every request of a higher or equal priority held before it."""
        held = Held((-int(request.priority), next(self._arrivals)), request, key, self._turn())
        if not self.waiting or self.waiting[-1].order < held.order:
            self.waiting.append(held)  # the usual case: no higher priority than the last one
        else:
            bisect.insort(self.waiting, held, key=lambda each: each.order)
        self.per_slot[key] += 1
        return held

    def remove(self, held: Held) -> None:
        self.waiting.remove(held)
        self.per_slot[held.key] -= 1
        if not self.per_slot[held.key]:
            del self.per_slot[held.key]

    def _turn(self) -> Any:
        if self._on_asyncio is None:
            self._on_asyncio = is_asyncio_available()
            if self._on_asyncio:
                self._loop = asyncio.get_event_loop()
        return self._loop.create_future() if self._loop is not None else Deferred()
