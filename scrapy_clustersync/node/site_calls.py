"""Site calls, on the node's Redis thread (part of ``redis_thread.SyncWorker``): the turns the
reactor's ``ClusterTurns`` (plugin/cluster_turns.py) asks for, the 429/503 it reports, and the
sites any node found slowed down (heard on the control channel), handed to the reactor at once.

They go in the thread's next round trip (turns.py), slow-downs first, so that a reservation in
the same trip already sees a site blocked. A reservation answers offsets from the Redis clock's
"now" when the script ran; the script ran between the send and the answer, taken as half way:
``start = answered - took / 2 + offset`` on this node's ``time.monotonic()``. The error of that
is at most half a round trip, the same for every node near Redis.

An ask whose round trip failed (Redis away) is asked again in the next one; a script that
Redis refused answers no turn and a time to ask again, so the gate is never left waiting.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store.errors import StoreError
from .thread_api import ReservedTurns
from .thread_messages import SlowDown, WantTurns

if TYPE_CHECKING:
    from ..store import JobStore
    from ..store.round_trip import Answer, RoundTrip
    from ..store.site_scripts import SlowedDown, Turns, TurnsAsk
    from .control_follower import ControlFollower
    from .reactor_link import NodeLink

logger = logging.getLogger(__name__)

#: how soon the reactor asks again for a site whose call Redis refused
REFUSED_RETRY_S = 1.0


@dataclass(frozen=True)
class SiteCalls:
    """The site calls added to one round trip, until their answers are handed over."""

    slow_downs: tuple[tuple[SlowDown, Answer[SlowedDown]], ...]
    asks: tuple[tuple[TurnsAsk, Answer[Turns]], ...]


def merged(before: TurnsAsk | None, ask: TurnsAsk) -> TurnsAsk:
    """Two asks of one site as one: the later settings, the larger count, every done token
    and every good response."""
    if before is None:
        return ask
    return dataclasses.replace(ask, count=max(before.count, ask.count), good=before.good + ask.good,
                               done=before.done + ask.done)


class SiteCallsPart:
    """The site calls of ``SyncWorker`` (see the module doc)."""

    store: JobStore
    _post: Callable[..., object]
    _link: NodeLink
    _follower: ControlFollower

    def _init_site_calls(self) -> None:
        self._site_asks: dict[str, TurnsAsk] = {}  # not sent yet, per site
        self._slow_downs: list[SlowDown] = []
        self._site_calls: SiteCalls | None = None  # sent, not answered yet
        self._refusal_logged = False

    def _hand_on_sites_slowed(self) -> None:
        """Hand the reactor each site some node found slowed down (a 429/503: the control
        channel's "site ..." message), so it drops the turns of it it reserved."""
        for site in self._follower.take_sites_slowed():
            self._post(self._link.site_slowed, site)

    def _want_turns(self, message: WantTurns, now: float) -> None:
        site = message.ask.site
        self._site_asks[site] = merged(self._site_asks.get(site), message.ask)

    def _slow_down(self, message: SlowDown, now: float) -> None:
        self._slow_downs.append(message)

    @property
    def _site_calls_due(self) -> bool:
        return bool(self._site_asks or self._slow_downs)

    def _site_calls_in(self, trip: RoundTrip, closing: bool = False) -> SiteCalls | None:
        """Add what is due to ``trip`` (and what the last failed round trip did not answer);
        nothing while the node closes."""
        self._resend_unanswered()
        if closing or not self._site_calls_due:
            return None
        sites = self.store.sites
        slow = tuple((each, sites.slow_down_in(trip, each.site, each.retry_after_s, each.delay_s))
                     for each in self._slow_downs)
        asks = tuple((ask, sites.turns_in(trip, ask)) for ask in self._site_asks.values())
        self._slow_downs, self._site_asks = [], {}
        self._site_calls = SiteCalls(slow, asks)
        return self._site_calls

    def _resend_unanswered(self) -> None:
        calls, self._site_calls = self._site_calls, None
        if calls is None:
            return
        self._slow_downs[:0] = [each for each, _ in calls.slow_downs]
        for ask, _ in calls.asks:  # the earlier ask first, with what came since
            newer = self._site_asks.get(ask.site)
            self._site_asks[ask.site] = ask if newer is None else merged(ask, newer)

    def _site_calls_answered(self, calls: SiteCalls | None, took_s: float) -> None:
        """Hand the reactor the turns reserved, on its clock (see the module doc)."""
        if calls is None:
            return
        self._site_calls = None
        ran_at = time.monotonic() - took_s / 2
        for each, slowed in calls.slow_downs:
            try:
                slowed.result()
            except StoreError as exc:
                self._refused(each.site, exc)
        for ask, answer in calls.asks:
            try:
                turns = answer.result()
            except StoreError as exc:
                self._refused(ask.site, exc)
                reserved = ReservedTurns((), (), retry_at=time.monotonic() + REFUSED_RETRY_S)
            else:
                retry = None if turns.retry_s is None else ran_at + turns.retry_s
                reserved = ReservedTurns(
                    tuple(ran_at + offset for offset in turns.offsets_s), turns.tokens,
                    turns.step_s, turns.backoff_s, retry,
                    ran_at + turns.blocked_s if turns.blocked_s > 0 else None)
            self._post(self._link.turns_reserved, ask.site, reserved)

    def _refused(self, site: str, exc: StoreError) -> None:
        if not self._refusal_logged:
            self._refusal_logged = True
            logger.error("clustersync: Redis refused the politeness call of site %r (%s); "
                         "its requests wait and ask again", site, exc)
