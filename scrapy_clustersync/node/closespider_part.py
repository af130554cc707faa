"""The cluster's CLOSESPIDER_* counts on the node's Redis thread (part of
``redis_thread.SyncWorker``).

The reactor's extension (plugin/cluster_closespider.py) sends what it counted (``Counted``);
this part adds it to the job's totals in the turn's round trip (closespider.lua), at most one
call in flight, sent again under the same call id until answered (a retried call adds nothing
more). With ``CLOSESPIDER_PAGECOUNT`` on, it also keeps the node's page tickets: it asks for a
batch when the node is about to run out (or a request waits for one), and gives back what is
left when the node leaves or has nothing to do. A timed limit is checked every
``TIMED_CHECK_S`` on the Redis clock. The reason a limit stopped the job and the tickets
granted go to the reactor in ``NodeView``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store.closespider_script import CloseLimits, ClusterCounts, SpiderCounts
from ..store.script_base import new_call_id
from .closespider_message import Counted

if TYPE_CHECKING:
    from ..store import JobStore
    from ..store.round_trip import Answer, RoundTrip
    from .thread_messages import NodeView

#: how often a timed limit (CLOSESPIDER_TIMEOUT, _TIMEOUT_NO_ITEM) is checked
TIMED_CHECK_S = 0.25
#: how soon to ask again for tickets after Redis had none left
NO_TICKET_RETRY_S = 0.25
#: the most page tickets asked for at once
TICKET_BATCH_MAX = 16


def ticket_batch(pagecount: int) -> int:
    """Tickets asked for at once: small next to the limit, so that no node holds many the
    others wait for."""
    return max(1, min(TICKET_BATCH_MAX, pagecount // 8))


class CloseSpiderLink:
    """The reactor side (with ``reactor_link.NodeLink``: ``redis_thread.Link``)."""

    _view: NodeView

    def counted(self, message: Counted, wake: bool = False) -> None:
        self._say(message, wake)

    @property
    def stop_reason(self) -> str:
        return self._view.stop_reason

    @property
    def tickets(self) -> int:
        return self._view.tickets

    @property
    def closespider_totals(self) -> tuple[int, int, int]:
        return self._view.closespider_totals

    if TYPE_CHECKING:
        def _say(self, message: object, wake: bool = False) -> None: ...


class CloseSpiderPart:
    """The CloseSpider state of ``SyncWorker`` (see the module doc)."""

    store: JobStore
    _node_idle: bool

    def _init_closespider(self) -> None:
        self._cs_limits = CloseLimits()
        self._cs_pending = SpiderCounts()
        #: the call sent and not answered yet: (call id, counts, want, give back)
        self._cs_sending: tuple[str, SpiderCounts, int, int] | None = None
        self._cs_counts = ClusterCounts()
        self._cs_granted = 0
        self._cs_in_use = 0
        self._cs_waits = False
        self._cs_next_check = 0.0
        self._cs_next_want = 0.0

    def _cs_totals(self) -> tuple[int, int, int]:
        counts = self._cs_counts
        return counts.pages, counts.items, counts.errors

    def _counted(self, message: Counted) -> None:
        self._cs_pending += message.counts
        self._cs_limits = message.limits
        self._cs_in_use = message.in_use
        self._cs_waits = message.waits

    def _cs_want(self, now: float) -> int:
        """Tickets to ask for now (0: none)."""
        pagecount = self._cs_limits.pagecount
        if not pagecount or now < self._cs_next_want:
            return 0
        batch = ticket_batch(pagecount)
        spare = self._cs_granted - self._cs_in_use
        if spare <= 0 and self._cs_waits or (self._cs_in_use and spare < (batch + 1) // 2):
            return batch
        return 0

    def _closespider_in(self, trip: RoundTrip, now: float,
                        leaving: bool = False) -> Answer[ClusterCounts] | None:
        """Add the call that is due to ``trip`` (``leaving``: the last one, which gives back
        the tickets left); None if none is."""
        if self._cs_sending is None:
            want = 0 if leaving else self._cs_want(now)
            # a node with nothing to do keeps no ticket another node may wait for
            idle = self._node_idle and not self._cs_waits
            give_back = max(0, self._cs_granted - self._cs_in_use) if leaving or idle else 0
            timed = self._cs_limits.timed and now >= self._cs_next_check
            if not (self._cs_pending or want or give_back or timed):
                return None
            if self._cs_limits.timed:
                self._cs_next_check = now + TIMED_CHECK_S
            self._cs_sending = (new_call_id(), self._cs_pending, want, give_back)
            self._cs_pending = SpiderCounts()
        call_id, counts, want, give_back = self._cs_sending
        return self.store.closespider.count_in(trip, call_id, counts, self._cs_limits, want,
                                               give_back)

    def _closespider_answered(self, answer: Answer[ClusterCounts], now: float) -> None:
        """Apply the answer (its error is raised: the call is sent again under its id)."""
        result = answer.result()
        assert self._cs_sending is not None
        _, _, want, give_back = self._cs_sending
        self._cs_sending = None
        self._cs_granted += result.granted - give_back
        if want and not result.granted:
            self._cs_next_want = now + NO_TICKET_RETRY_S
        self._cs_counts = result
