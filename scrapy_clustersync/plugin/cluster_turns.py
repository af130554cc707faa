"""ClusterTurns: one politeness budget per site for the whole cluster, the ``SiteTurns`` of
``CLUSTERSYNC_POLITENESS = "cluster"`` (the default; "node" keeps Scrapy's own, ``LocalTurns``).

A site's turns are decided in Redis, on its clock (GCRA: store/lua/site_turns.lua), one start
per delay for every node together, and reserved by a node a few at a time (those that start
within ``HORIZON_S``), so a short delay costs no round trip per request. ``wait_s`` answers from
the turns this node reserved; with none left it asks the node's Redis thread for more (a
message: the reactor never waits on Redis), answers ``math.inf``, and wakes the gate when they
come. A turn not used within its own delay (at least ``STALE_MIN_S``) of its start, or of when
it came if later (a node far from Redis gets its turns half a round trip after their start), is
dropped: the gate had nothing for it, and turns kept longer would go out at once. So is a turn
whose next one has started: of turns that came after several had started, one goes, not all.

What a site's delay is: its ``CLUSTERSYNC_SITE_DELAYS`` entry, else (with AutoThrottle on, or
``DOWNLOAD_SLOTS``) the delay of its Scrapy slot, so AutoThrottle drives the cluster's pace,
else ``DOWNLOAD_DELAY``. ``RANDOMIZE_DOWNLOAD_DELAY`` draws each turn's delay in 0.5-1.5 x in
the script (from a seed the node sends), so the jitter holds for the cluster as a whole.

With ``CONCURRENT_REQUESTS_PER_DOMAIN`` set by the project (not Scrapy's default), it is a cap
for the cluster too: each turn takes one of the site's in-flight slots, leased for
``CLUSTERSYNC_LEASE_TIMEOUT`` at most (a node killed with -9 blocks them no longer), freed when
its response or error comes (told to Redis with the next call, or at the end of the reactor's
turn). A 429, or a 503 with ``Retry-After`` (seconds or an HTTP date), blocks the site for the
cluster until then; a 503 without one doubles its backoff (capped), which good responses shrink.
Every node hears of a slow-down at once (the control channel, ``slowed``) and drops the turns of
the site it reserved; the node that got it drops its own before it tells Redis.
A site with no delay and no cap costs nothing: no Redis call at all (unless it was slowed down).

What the node sees of each site it paces (site_summary.py ``SiteSeen``) goes into its node record
(``summary``, built once per heartbeat); a site idle for ``SITE_IDLE_S`` is forgotten then, so a
broad crawl's sites do not pile up here.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Callable
from time import monotonic
from typing import TYPE_CHECKING, Any, Protocol

from ..store.lease_script import LeasePace
from ..store.site_scripts import TurnsAsk
from .retry_after import retry_after_s
from .site_summary import SITES_IN_RECORD, SiteSeen, idle_sites, summary

if TYPE_CHECKING:
    from scrapy.core.downloader import Slot
    from scrapy.settings import BaseSettings

    from ..node.thread_api import ReservedTurns

#: turns one reservation asks for at most
TURNS_PER_CALL_MAX = 32
#: a reservation takes the turns that start this soon (at least one)
HORIZON_S = 0.25
#: a reserved turn is dropped once this long late, if its delay is shorter
STALE_MIN_S = 0.05
#: Scrapy's RANDOMIZE_DOWNLOAD_DELAY: each delay in 0.5-1.5 x
JITTER = 0.5
#: the statuses that slow a site down for the cluster
SLOW_DOWN_STATUSES = (429, 503)


class SiteLink(Protocol):
    """What ClusterTurns needs of the node's Redis thread (node/site_link.py)."""

    def want_turns(self, ask: TurnsAsk) -> None: ...

    def slow_down(self, site: str, retry_after_s: float | None, delay_s: float) -> None: ...

    def listen_turns(self, callback: Callable[[str, ReservedTurns], None]) -> None: ...

    def set_pace(self, pace: LeasePace) -> None: ...

    def listen_slowed(self, callback: Callable[[str], None]) -> None: ...


class ClusterTurns:
    """The cluster's turns of each site (see the module doc)."""

    def __init__(self, *, download_delay: float, randomize: bool, site_delays: dict[str, float],
                 per_domain: int, lease_s: float, slot_driven: bool = False,
                 later: Callable[[float, Callable[[], None]], Any] | None = None,
                 uncapped_per_domain: int | None = None,
                 clock: Callable[[], float] = monotonic) -> None:
        self.lease_s = lease_s
        self._clock = clock  # the gate's: when turns came, when a site was blocked or used
        #: Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN when the project did not set it (no cap):
        #: ``configure`` given that value leaves the cluster uncapped
        self.uncapped_per_domain = uncapped_per_domain
        #: AutoThrottle or DOWNLOAD_SLOTS: a site's Scrapy slot says its delay
        self.slot_driven = slot_driven
        self._later = later
        self._link: SiteLink | None = None
        self._wake: Callable[[], None] = lambda: None
        self._demand: Callable[[str], int] = lambda key: 1
        #: site -> its turns reserved: start, token, when it came
        self._reserved: dict[str, deque[tuple[float, str, float]]] = {}
        self._asked: dict[str, int] = {}  # site -> the settings' version it was asked with
        self._stale: set[str] = set()  # sites whose ask under way was made before a slow-down
        self._version = 0
        self._retry_at: dict[str, float] = {}
        self._inflight: dict[str, list[str]] = {}  # tokens of turns under way
        self._done: dict[str, list[str]] = {}  # tokens of turns ended, not told yet
        self._good: Counter[str] = Counter()  # good responses of slowed sites, not told yet
        self._slowed: set[str] = set()  # sites with a backoff or block: asked even with no delay
        self._seen: dict[str, SiteSeen] = {}  # what the node record says of each site paced
        self._flush_due = False
        self.configure(download_delay=download_delay, randomize=randomize,
                       site_delays=site_delays, per_domain=per_domain)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> ClusterTurns:
        """Built from a crawler's settings (``DOWNLOAD_DELAY``, ``CLUSTERSYNC_SITE_DELAYS``, the
        cap: ``CONCURRENT_REQUESTS_PER_DOMAIN`` if the project set it)."""
        per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
        uncapped = None
        if settings.getpriority("CONCURRENT_REQUESTS_PER_DOMAIN") in (None, 0):
            uncapped, per_domain = per_domain, 0  # Scrapy's default stays per node
        return cls(download_delay=settings.getfloat("DOWNLOAD_DELAY"),
                   randomize=settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True),
                   site_delays={str(k): float(v) for k, v in
                                settings.getdict("CLUSTERSYNC_SITE_DELAYS").items()},
                   per_domain=per_domain,
                   lease_s=settings.getfloat("CLUSTERSYNC_LEASE_TIMEOUT", 60.0),
                   slot_driven=settings.getbool("AUTOTHROTTLE_ENABLED")
                   or bool(settings.getdict("DOWNLOAD_SLOTS")), uncapped_per_domain=uncapped)

    def configure(self, *, download_delay: float, randomize: bool,
                  site_delays: dict[str, float], per_domain: int) -> None:
        """Take new politeness settings (the shared settings changed live): the turns reserved
        and not used are dropped, and answers to asks made before are not used. A
        ``per_domain`` of Scrapy's default, with the project not setting it, is no cap."""
        self.download_delay = max(0.0, float(download_delay))
        self.jitter = JITTER if randomize else 0.0
        self.site_delays = dict(site_delays)
        uncapped = per_domain == self.uncapped_per_domain
        self.per_domain = 0 if uncapped else max(0, int(per_domain))
        self._version += 1
        for site in list(self._reserved):
            self._drop_reserved(site)
        self._tell_pace()

    def _tell_pace(self) -> None:
        """Leases hand out each site's requests no faster than these settings let it start (a
        throttled site never fills the prefetch: store/lua/frontier.lua)."""
        if self._link is not None:
            self._link.set_pace(LeasePace(
                on=True, delay_s=self.download_delay, site_delays=dict(self.site_delays),
                per_domain=self.per_domain, recorded_first=self.slot_driven))

    def bind(self, link: SiteLink, wake: Callable[[], None],
             demand: Callable[[str], int] = lambda key: 1) -> None:
        """Talk to the node's Redis thread through ``link``; call ``wake`` when turns came;
        ``demand(site)``: how many requests of the site wait (what one call asks for)."""
        self._link, self._wake, self._demand = link, wake, demand
        link.listen_turns(self.reserved)
        link.listen_slowed(self.slowed)
        self._tell_pace()

    # ---- SiteTurns ---------------------------------------------------------------------------
    def delay_of(self, key: str, slot: Slot | None) -> float:
        """The delay of site ``key`` (see the module doc)."""
        if key in self.site_delays:
            return self.site_delays[key]
        if self.slot_driven and slot is not None:
            return float(slot.delay)
        return self.download_delay

    def wait_s(self, key: str, slot: Slot | None, now: float) -> float:
        delay = self.delay_of(key, slot)
        if self._link is None or not (delay or self.per_domain or key in self._slowed):
            return 0.0  # nothing to keep: no Redis call at all
        turns = self._reserved.get(key)
        late = max(delay, STALE_MIN_S)
        # a turn is late from its start, or from when it came if later: a far node's come half
        # a round trip after their start, and would all be dropped and asked for again. A turn
        # is passed, too, once a later one started: turns that came (or are looked at) after
        # several started never go to the site at once, the last started alone is used (turns
        # of a cap without a delay share their start: they go together, as the cap allows)
        while turns and (max(turns[0][0], turns[0][2]) + late < now
                         or len(turns) > 1 and turns[0][0] < turns[1][0] <= now):
            self._ended(key, turns.popleft()[1])  # its time passed with nothing to start
        if turns:
            return turns[0][0] - now
        self._ask(key, delay, now)
        return math.inf

    def taken(self, key: str, now: float) -> None:
        turns = self._reserved.get(key)
        if turns and turns[0][0] <= now:
            token = turns.popleft()[1]
            if token:
                self._inflight.setdefault(key, []).append(token)
            seen = self._seen.get(key)
            if seen is not None:
                seen.in_flight += 1
                seen.used_at = now

    def done(self, key: str) -> None:
        """A request of site ``key`` let through ended (its response or error came)."""
        tokens = self._inflight.get(key)
        if tokens:
            self._ended(key, tokens.pop(0))
        seen = self._seen.get(key)
        if seen is not None and seen.in_flight > 0:
            seen.in_flight -= 1

    def answered(self, key: str, status: int, headers: Any) -> None:
        """A response of site ``key`` came: a 429/503 slows the site for the cluster."""
        if status not in SLOW_DOWN_STATUSES:
            if key in self._slowed:
                self._good[key] += 1
            return
        retry = retry_after_s(headers.get(b"Retry-After") if headers is not None else None)
        if self._link is None:
            return
        self._forget_turns_of(key)  # before Redis hears of it: no turn of it goes meanwhile
        if retry:  # the node record says so before Redis answers
            seen = self._seen[key]
            seen.blocked_until = max(seen.blocked_until, self._clock() + retry)
        self._link.slow_down(key, retry, self.delay_of(key, None))

    def slowed(self, site: str) -> None:
        """Some node (this one too) found ``site`` slowed down (told at once, on the reactor):
        its turns reserved and not used are dropped, an answer to an ask made before is not
        used, and the gate is woken to ask again (the answer then holds the block or backoff)."""
        self._forget_turns_of(site)
        self._wake()

    # ---- the Redis thread's answers ---------------------------------------------------------
    def reserved(self, site: str, turns: ReservedTurns) -> None:
        """Turns of ``site`` came (on the reactor); the gate is woken."""
        version = self._asked.pop(site, None)
        self._retry_at.pop(site, None)
        stale = site in self._stale  # asked before a slow-down of the site
        self._stale.discard(site)
        if version != self._version or stale:  # asked before the settings changed: not used
            self._done.setdefault(site, []).extend(t for t in turns.tokens if t)
            self._flush_soon()
        else:
            queue = self._reserved.setdefault(site, deque())
            came = self._clock()
            queue.extend((start, token, came)
                         for start, token in zip(turns.starts, turns.tokens, strict=True))
            if turns.retry_at is not None and not turns.starts:
                self._retry_at[site] = turns.retry_at
                self._call_later(turns.retry_at - monotonic(), self._wake)
            self._saw_answer(site, turns)
        if turns.backoff_s > 0:
            self._slowed.add(site)
        elif site in self._slowed and not self._good.get(site):
            self._slowed.discard(site)
        self._wake()

    # ---- the node record ----------------------------------------------------------------------
    def summary(self, now: float, shown_max: int = SITES_IN_RECORD) -> dict[str, Any]:
        """The sites this node paces as its record shows them (site_summary.py ``summary``),
        once the sites idle for long are forgotten. On the reactor, once per heartbeat."""
        self.forget_idle(now)
        return summary(self._seen, now, shown_max)

    def forget_idle(self, now: float) -> None:
        """Forget every site idle for ``SITE_IDLE_S`` (nothing in flight, not blocked, no ask
        under way): each of the per-site records here, so they stay bounded; turns it still had
        reserved are given back. A site used again is asked for anew."""
        for site in idle_sites(self._seen, now, busy=self._asked):
            del self._seen[site]
            self._drop_reserved(site)
            if not self._inflight.get(site):
                self._inflight.pop(site, None)
            for each in (self._retry_at, self._good):
                each.pop(site, None)
            self._slowed.discard(site)
            self._stale.discard(site)

    def _saw_answer(self, site: str, turns: ReservedTurns) -> None:
        seen = self._seen.get(site)
        if seen is None:
            return
        seen.step_s, seen.backoff_s = turns.step_s, turns.backoff_s
        if turns.blocked_until is not None:
            seen.blocked_until = turns.blocked_until

    # ---- internals ---------------------------------------------------------------------------
    def _ask(self, key: str, delay: float, now: float) -> None:
        if key in self._asked or now < self._retry_at.get(key, 0.0):
            return
        assert self._link is not None
        self._asked[key] = self._version
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen[key] = SiteSeen()
        seen.asked_s, seen.used_at = delay, now
        # the turns of the horizon, even before their requests wait: a short delay then costs
        # one call per few requests (a turn with nothing to start is dropped, unused)
        ahead = int(HORIZON_S / delay) + 1 if delay > 0 else 0
        count = max(1, min(TURNS_PER_CALL_MAX, max(self._demand(key), ahead)))
        self._link.want_turns(TurnsAsk(
            key, count, delay, self.jitter, random.getrandbits(31), HORIZON_S,
            self.per_domain, self.lease_s, self._good.pop(key, 0),
            tuple(self._done.pop(key, ()))))

    def _ended(self, key: str, token: str) -> None:
        if token:
            self._done.setdefault(key, []).append(token)
            self._flush_soon()

    def _forget_turns_of(self, site: str) -> None:
        """A 429/503 of ``site``: no turn of it reserved before is used (see ``slowed``)."""
        self._slowed.add(site)
        if site not in self._seen:  # slowed by another node: forgotten once idle, as any
            self._seen[site] = SiteSeen(used_at=self._clock())
        self._drop_reserved(site)
        if site in self._asked:
            self._stale.add(site)

    def _drop_reserved(self, site: str) -> None:
        for _, token, _ in self._reserved.pop(site, ()):
            self._ended(site, token)

    def _flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            self._call_later(0.0, self._flush_done)

    def _flush_done(self) -> None:
        """Tell Redis the turns that ended of sites no ask is under way for (else the next ask
        carries them)."""
        self._flush_due = False
        if self._link is None:
            return
        for site in [s for s in self._done if s not in self._asked]:
            self._link.want_turns(TurnsAsk(site, 0, 0.0, 0.0, 0, 0.0, self.per_domain,
                                           self.lease_s, 0, tuple(self._done.pop(site))))

    def _call_later(self, delay_s: float, call: Callable[[], None]) -> None:
        if self._later is not None:
            self._later(max(0.0, delay_s), call)
            return
        from twisted.internet import reactor

        clock: Any = reactor
        clock.callLater(max(0.0, delay_s), call)
