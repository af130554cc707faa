"""LocalRequests: the requests a node crawls itself because they cannot travel through Redis.

Scrapy keeps a request it cannot serialize in memory; the scheduler does the same with a
request ``RequestCodec`` refuses (a callback that is no spider method, meta it cannot encode,
one over ``CLUSTERSYNC_MAX_REQUEST_BYTES``): it is crawled on this node, first, and it is not
crash-safe (README: lost if the node stops before crawling it).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from ..codec import LEASE_META_KEY, UnencodableRequest

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)


class LocalRequests:
    """Requests that cannot travel, in the order they came, crawled on this node."""

    def __init__(self) -> None:
        self._requests: deque[Request] = deque()
        self._kinds_warned: set[str] = set()  # what made them unable to travel (warned once)

    def __len__(self) -> int:
        return len(self._requests)

    def keep(self, request: Request, refusal: UnencodableRequest, replaces: bool,
             spider: Any) -> None:
        """Keep ``request``. A replacement (retry, redirect) keeps the lease of the one it
        replaces; any other request has none (its parent's lease meta, copied from the
        response, is dropped)."""
        if not replaces:
            request.meta.pop(LEASE_META_KEY, None)
        self._requests.append(request)
        if refusal.kind not in self._kinds_warned:
            self._kinds_warned.add(refusal.kind)
            # Scrapy's own wording (core/scheduler.py), so that what users grep for still matches
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - it is crawled on "
                "this node only and is not crash-safe (lost if the node stops first); no more "
                "requests with %(kind)s will be logged (stats being collected: "
                "scheduler/unserializable)",
                {"request": request, "reason": refusal.reason, "kind": refusal.kind},
                extra={"spider": spider},
            )

    def pop(self) -> Request:
        """The oldest request kept."""
        return self._requests.popleft()
