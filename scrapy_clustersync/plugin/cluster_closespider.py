"""ClusterCloseSpider: Scrapy's CLOSESPIDER_* settings count for the whole cluster.

Scrapy's CloseSpider extension counts one process: two nodes with ``CLOSESPIDER_PAGECOUNT =
50`` would fetch 100 pages and more. In cluster mode the add-on turns it off and installs this
extension instead, which counts what Scrapy's counts (``response_received``, ``item_scraped``,
``spider_error``) and hands the counts to the node's Redis thread; closespider.lua adds them to
the job's totals and, when a total reaches its limit (or ``CLOSESPIDER_TIMEOUT`` /
``CLOSESPIDER_TIMEOUT_NO_ITEM`` passed on the Redis clock), stops the job with Scrapy's close
reason (``closespider_pagecount`` ...). Every node then closes with that reason (job_control.py)
and the job is left stopped, its ``stop_reason`` recorded.

Pages: with ``CLOSESPIDER_PAGECOUNT`` on, a request goes to its site only with a page ticket
(``take``, called by the download gate); tickets come from Redis in small batches, at most
the limit for the whole cluster. A request that ends without a response gives its ticket back
(``give_back``). So the sites see at most ``CLOSESPIDER_PAGECOUNT`` requests of the cluster
(and a request that failed may be retried with a new ticket).

With ``CLUSTERSYNC_POLITENESS = "node"`` the extension is off and Scrapy's own counts each
process alone, as without the add-on. Limits follow the shared settings live
(``settings_changed``).
"""

from __future__ import annotations

import dataclasses
import logging
from time import monotonic
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from ..node.closespider_message import Counted
from ..store.closespider_script import CloseLimits, SpiderCounts
from .signals import node_opened, settings_changed

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from typing_extensions import Self

    from .cluster_scheduler import ClusterScheduler

logger = logging.getLogger(__name__)

#: CLOSESPIDER_* setting -> CloseLimits field
LIMIT_SETTINGS = {
    "CLOSESPIDER_PAGECOUNT": "pagecount", "CLOSESPIDER_ITEMCOUNT": "itemcount",
    "CLOSESPIDER_ERRORCOUNT": "errorcount", "CLOSESPIDER_TIMEOUT": "timeout_s",
    "CLOSESPIDER_TIMEOUT_NO_ITEM": "timeout_no_item_s",
    "CLOSESPIDER_PAGECOUNT_NO_ITEM": "pagecount_no_item",
}
_FLOATS = {"timeout_s", "timeout_no_item_s"}
#: how long a node's own page count at CLOSESPIDER_PAGECOUNT holds its scheduler while the
#: job's total it hears is short of it (see ``pages_used_up``)
OWN_COUNT_GRACE_S = 5.0
#: counts this close to their limit (a share of it) are sent to Redis at once
NEAR_LIMIT_SHARE = 0.25


#: "cluster" (the default) or "node" (config.py validates it)
POLITENESS_SETTING = "CLUSTERSYNC_POLITENESS"


def node_mode(settings: BaseSettings) -> bool:
    """True if ``CLUSTERSYNC_POLITENESS`` is "node": Scrapy's per-process behaviour stays."""
    return str(settings.get(POLITENESS_SETTING) or "cluster").lower() == "node"


def limits_from(settings: BaseSettings | dict[str, Any],
                base: CloseLimits | None = None) -> CloseLimits:
    """The limits ``settings`` give, over ``base`` (from a dict of changes: only the keys it
    has; None: unset, off). Raises ValueError naming a setting whose value is not a number
    of 0 or more."""
    values: dict[str, Any] = {}
    for name, field in LIMIT_SETTINGS.items():
        if isinstance(settings, dict) and name not in settings:
            continue
        raw = settings[name] if isinstance(settings, dict) else settings.get(name)
        unit = "seconds" if field in _FLOATS else "a whole number"
        try:
            number: float = float(raw or 0) if field in _FLOATS else int(raw or 0)
        except (TypeError, ValueError):
            number = -1
        if number < 0:
            raise ValueError(f"{name} = {raw!r} is not accepted: give {unit}, 0 or more "
                             "(0: off)")
        values[field] = number
    return dataclasses.replace(base or CloseLimits(), **values)


class ClusterCloseSpider:
    """Counts for the cluster's CLOSESPIDER_* limits and holds the node's page tickets (see
    the module doc)."""

    def __init__(self, crawler: Crawler, limits: CloseLimits) -> None:
        self.crawler = crawler
        self.limits = limits
        self.node: ClusterScheduler | None = None
        self._pending = SpiderCounts()
        self._in_use = 0  # tickets taken and not given back
        self._waits = False
        self._send_due = False
        self._pages_seen = 0  # responses this node counted for the job (with a limit on)
        self._ahead_since: float | None = None  # own count at the limit, the job's total not
        self._counting = False  # connected to response_received and item_scraped

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if node_mode(crawler.settings):
            raise NotConfigured("CLUSTERSYNC_POLITENESS is 'node': Scrapy's CloseSpider counts")
        ext = cls(crawler, limits_from(crawler.settings))
        connect = crawler.signals.connect
        connect(ext.node_opened, signal=node_opened)
        ext._count_pages_and_items()
        connect(ext.spider_error, signal=signals.spider_error)
        connect(ext.settings_changed, signal=settings_changed)
        return ext

    def _count_pages_and_items(self) -> None:
        """Listen to every response and item while a limit is on, and only then: a signal
        receiver costs every page a call, and with no limit there is nothing to count."""
        manager = getattr(self.crawler, "signals", None)  # (none: driven by hand)
        if manager is None or self._counting == self.limits.any:
            return
        self._counting = self.limits.any
        pairs = ((self.response_received, signals.response_received),
                 (self.item_scraped, signals.item_scraped))
        for receiver, signal in pairs:
            if self._counting:
                manager.connect(receiver, signal=signal)
            else:
                manager.disconnect(receiver, signal=signal)

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler
        scheduler.pages_used_up = self.pages_used_up
        self._send(wake=self.limits.timed)

    # ---- counting ----------------------------------------------------------------------------
    def response_received(self, **_: Any) -> None:
        if self.limits.any:  # as the job's totals count them: a limit set live counts from then
            self._pages_seen += 1
        self._count(SpiderCounts(pages=1))

    def item_scraped(self, **_: Any) -> None:
        self._count(SpiderCounts(items=1))

    def spider_error(self, **_: Any) -> None:
        self._count(SpiderCounts(errors=1))

    def _count(self, counts: SpiderCounts) -> None:
        if not self.limits.any:
            return
        self._pending += counts
        self._send_soon()

    def _send(self, wake: bool = False) -> None:
        self._send_due = False
        io = self.node.io if self.node is not None else None
        if io is None:
            return
        wake = wake or self._near_a_limit(io.closespider_totals)
        io.counted(Counted(self._pending, self.limits, self._in_use, self._waits), wake)
        self._pending = SpiderCounts()

    def _near_a_limit(self, totals: tuple[int, int, int]) -> bool:
        """The job's items or errors, with what this node counted since, are within
        ``NEAR_LIMIT_SHARE`` of their limit: the thread sends them at once (else with its next
        turn), so that the cluster stops as soon as it may."""
        pending = self._pending
        for limit, total, more in ((self.limits.itemcount, totals[1], pending.items),
                                   (self.limits.errorcount, totals[2], pending.errors)):
            if limit and more and total + more >= limit * (1 - NEAR_LIMIT_SHARE):
                return True
        return False

    # ---- page tickets (the download gate) ----------------------------------------------------
    @property
    def ticketed(self) -> bool:
        """A request needs a ticket to go to its site (CLOSESPIDER_PAGECOUNT is on)."""
        return bool(self.limits.pagecount) and self.node is not None and self.node.io is not None

    def pages_used_up(self) -> bool:
        """The cluster's pages reached CLOSESPIDER_PAGECOUNT as far as this node knows: the
        job's total it last heard with what it counted since, or its own count alone (both
        can only be short of the truth; the own count for ``OWN_COUNT_GRACE_S`` at most). Its
        scheduler then hands out nothing more, as Scrapy's engine takes nothing more once its
        CloseSpider closed it; the job stops on Redis."""
        if not self.ticketed:
            return False
        assert self.node is not None and self.node.io is not None
        heard = self.node.io.closespider_totals[0] + self._pending.pages
        if heard >= self.limits.pagecount:
            return True
        if self._pages_seen < self.limits.pagecount:
            self._ahead_since = None
            return False
        # its own count only: Redis is to hear of it within a round trip; a total still short
        # after OWN_COUNT_GRACE_S (Redis came back older than the count) is the one that holds,
        # or the node would wait for ever for a stop that never comes
        now = monotonic()
        if self._ahead_since is None:
            self._ahead_since = now
        return now - self._ahead_since < OWN_COUNT_GRACE_S

    def available(self) -> bool:
        """A request may go to its site now; if not, the Redis thread is asked for tickets at
        once (the gate is woken when they come: a new ``NodeView``)."""
        if not self.ticketed:
            return True
        assert self.node is not None and self.node.io is not None
        if self.node.io.tickets - self._in_use > 0:
            return True
        if not self._waits:
            self._waits = True
            self._send(wake=True)
        return False

    def take(self) -> None:
        """A request goes to its site: it uses a ticket."""
        if self.ticketed:
            self._in_use += 1
            if self._waits:
                self._waits = False
            self._send_soon()

    def give_back(self) -> None:
        """A request let through ended without a response: its ticket serves another."""
        if self.ticketed and self._in_use > 0:
            self._in_use -= 1
            self._send_soon()

    def _send_soon(self) -> None:
        """Send at the end of this turn of the reactor: what it counted goes in one message."""
        if not self._send_due:
            self._send_due = True
            from twisted.internet import reactor

            clock: Any = reactor
            clock.callLater(0, self._send)

    # ---- live settings -----------------------------------------------------------------------
    def settings_changed(self, changed: dict[str, Any], version: int, **_: Any) -> None:
        """Apply the CLOSESPIDER_* limits of a new shared-settings version (a bad value is
        logged and the last good limits stay)."""
        if not any(name in changed for name in LIMIT_SETTINGS):
            return
        try:
            self.set_limits(limits_from(changed, self.limits))
        except ValueError as exc:
            logger.error("clustersync: shared settings version %d: %s; the limits in force stay",
                         version, exc)

    def set_limits(self, limits: CloseLimits) -> None:
        """Count against ``limits`` from now on (the cluster's totals are kept)."""
        if limits != self.limits:
            logger.info("clustersync: CloseSpider limits for the cluster now %s", limits)
            self.limits = limits
            self._count_pages_and_items()
            self._send(wake=True)
