"""HeldRequests: the requests that wait at the download gate (download_gate.py), in the order they
go: priority (highest first), then arrival."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy import Request


@dataclass(eq=False)
class Held:
    """One request waiting at the gate for its site's turn (``key``: its download slot).

    ``turn`` fires with None when the request may go on to the downloader, or with the request
    itself when it is handed back to the job's queue instead (download_gate.py).
    """

    order: tuple[int, int]
    request: Request
    key: str
    turn: Deferred[Request | None] = field(default_factory=Deferred)


class HeldRequests:
    """The held requests, kept sorted; there are at most ``CONCURRENT_REQUESTS`` of them (the
    engine counts them as downloads under way), so a walk over all of them is cheap."""

    def __init__(self) -> None:
        self._held: list[Held] = []
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Held]:
        """The held requests in order, over a copy: ``remove`` may be called meanwhile."""
        return iter(list(self._held))

    def add(self, request: Request, key: str) -> Held:
        """Hold ``request`` behind every request of a higher or equal priority held before it."""
        held = Held((-int(request.priority), next(self._arrivals)), request, key)
        bisect.insort(self._held, held, key=lambda each: each.order)
        return held

    def remove(self, held: Held) -> None:
        self._held.remove(held)
