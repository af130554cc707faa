"""What this node sees of each site's politeness, for its node record (``sites``).

``ClusterTurns`` keeps one small ``SiteSeen`` per site it paces (a delay, a cap or a slow-down):
the delay in force as Redis last answered it, the backoff, a block until some time (a
Retry-After), this node's requests of the site in flight, and when it last used the site. The
hot path only counts (a request let through, a request ended); the summary is built on the
reactor at most once per heartbeat (``SiteReport``), bounded: the ``SITES_IN_RECORD`` busiest sites
(most in flight, then used last), and how many more there are. A site idle for ``SITE_IDLE_S``
is forgotten (Redis forgets it then too: store/site_scripts.py ``SITE_IDLE_MS``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from time import monotonic
from typing import Any

from ..store.site_scripts import SITE_IDLE_MS

#: the sites a node record lists at most (the others are counted)
SITES_IN_RECORD = 20
#: a site with nothing in flight, not blocked and unused this long is forgotten
SITE_IDLE_S = SITE_IDLE_MS / 1000


@dataclass(slots=True)
class SiteSeen:
    """One site as this node sees it. Times are the node's ``time.monotonic()``."""

    #: the delay this node asked with (its settings, or its Scrapy slot's with AutoThrottle)
    asked_s: float = 0.0
    #: the delay in force for the cluster as Redis last answered (its backoff if longer)
    step_s: float | None = None
    backoff_s: float = 0.0
    #: no turn before this (a Retry-After); 0: not blocked
    blocked_until: float = 0.0
    in_flight: int = 0
    used_at: float = 0.0

    def idle(self, now: float) -> bool:
        """Whether the site can be forgotten: nothing in flight, not blocked, unused long."""
        return (self.in_flight <= 0 and self.blocked_until <= now
                and self.used_at < now - SITE_IDLE_S)


def summary(seen: dict[str, SiteSeen], now: float, shown_max: int = SITES_IN_RECORD,
            wall_now: float | None = None) -> dict[str, Any]:
    """The record's ``sites``: ``total`` sites paced, the ``shown`` ones (busiest first: most
    in flight, then used last) and how many ``more``. Each shown site: ``site``, ``delay_s``
    (in force), ``backoff_s``, ``blocked_s`` (seconds left, 0: not blocked), ``blocked_until``
    (Unix seconds, None), ``in_flight`` (this node's), ``idle_s`` (since this node used it)."""
    wall = time.time() if wall_now is None else wall_now
    busiest = sorted(seen.items(), key=lambda kv: (-kv[1].in_flight, -kv[1].used_at, kv[0]))
    shown = [_site(site, each, now, wall) for site, each in busiest[:max(0, shown_max)]]
    return {"total": len(seen), "shown": shown, "more": len(seen) - len(shown)}


def _site(site: str, each: SiteSeen, now: float, wall: float) -> dict[str, Any]:
    blocked_s = max(0.0, each.blocked_until - now)
    delay = each.asked_s if each.step_s is None else each.step_s
    return {"site": site, "delay_s": round(delay, 3), "backoff_s": round(each.backoff_s, 3),
            "blocked_s": round(blocked_s, 3),
            "blocked_until": round(wall + blocked_s, 3) if blocked_s else None,
            "in_flight": max(0, each.in_flight), "idle_s": round(max(0.0, now - each.used_at), 3)}


def idle_sites(seen: dict[str, SiteSeen], now: float, busy: Iterable[str] = ()) -> list[str]:
    """The sites of ``seen`` that can be forgotten (``busy``: those with an ask under way)."""
    keep = set(busy)
    return [site for site, each in seen.items() if site not in keep and each.idle(now)]


class SiteReport:
    """Puts the summary into the node's record (``set_sites``), built at most once per
    ``every_s`` (the heartbeat interval) when ``maybe_publish`` is called on the reactor."""

    def __init__(self, build: Callable[[float], dict[str, Any]],
                 set_sites: Callable[[dict[str, Any]], None], every_s: float) -> None:
        self.build, self.set_sites, self.every_s = build, set_sites, every_s
        self._next = 0.0

    def maybe_publish(self) -> None:
        now = monotonic()
        if now >= self._next:
            self._next = now + self.every_s
            self.set_sites(self.build(now))


def report_sites(turns: Any, scheduler: Any) -> None:
    """With cluster turns (``turns`` has ``summary``), put what they see of each site into the
    node's record (``scheduler.node_info``), built when the Redis thread hands something over,
    at most once per heartbeat interval."""
    build = getattr(turns, "summary", None)
    info = getattr(scheduler, "node_info", None)
    if build is None or info is None or scheduler.io is None:
        return
    report = SiteReport(build, lambda sites: setattr(info, "sites", sites),
                        max(0.5, scheduler.config.heartbeat_interval_s))
    scheduler.io.listen(report.maybe_publish)
