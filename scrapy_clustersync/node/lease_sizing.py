"""How many entries a node holds leased ahead: what it can start before its next lease arrives.

A lease that is too small leaves the downloader waiting for Redis (a node far from Redis waits
a round trip per lease); one that is too large keeps work from the other nodes (a node that
leases 36 requests of a site it may fetch once a second holds them for half a minute while
the others sit idle). So the reactor sizes the prefetch from what the node can put on the wire
before the next lease comes back (``LeaseSizer.target``):

    what the node can start before the next lease arrives:
        room now (free concurrency, within each site's limit and delay)
        + the measured rate at which requests go on to the downloader x the horizon,
        and never less than what the downloader runs at once over its sites (``capacity``)
    - what was handed to the engine and is not on the wire yet (download gate, slot queues)

and nothing (0) when what the engine holds covers it. The engine takes every entry it is
handed while its downloader runs fewer than ``CONCURRENT_REQUESTS`` (a polite site's requests
wait at the download gate or in their slot's queue meanwhile), so a target kept above what
the node can start would lease again each time the engine takes, until the node holds about
``CONCURRENT_REQUESTS`` requests it starts over many seconds, while nodes started a second
later find the queue empty.

The horizon is twice how long a lease asked now takes to arrive (the thread leases once half
the target is gone): a few of the Redis thread's round trips (it measures them), and never
less than ``MIN_HORIZON_S``. The rate is the highest recent one, decaying slowly: a node that
starves takes fewer requests, and a rate that followed it down would size the next lease
smaller still. The reactor tells the Redis thread the target (``Demand``) when it changed; the
thread leases what is missing once half of it is gone. ``CLUSTERSYNC_PREFETCH`` set to a
number fixes what the node holds ahead instead: that number, less what it handed to the engine
and has not started (``fixed``), so that a node whose engine holds a polite site's requests at
the download gate does not lease the whole queue, two at a time, while the others find it
empty.

Everything here is the reactor's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

#: the shortest horizon a lease is sized for: a busy machine may not run the Redis thread for
#: tens of milliseconds, whatever the round trip to Redis
MIN_HORIZON_S = 0.5
#: round trips of the Redis thread the target covers: twice (the thread leases once half the
#: target is gone) those between a lease asked and its entries on the reactor, the round trip
#: under way and the lease's own (turns.py: a flush or a heartbeat goes in the same one), and
#: one more for a turn that takes longer (a busy machine, a large batch ahead of the lease)
HORIZON_ROUND_TRIPS = 6
#: the longest a batch of writes lingers before it goes (write_stream.py)
LINGER_S = 0.05
#: how often the downloader is looked at, at most (it walks every download slot)
REFRESH_S = 0.05
#: a new target is told the Redis thread only if it differs from the last by more than this
#: share
TARGET_SLACK = 0.2
#: the start rate is measured over windows of about this long
RATE_WINDOW_S = 0.5
#: the share of the rate kept per window when fewer requests were taken: the highest recent
#: rate counts, falling by half in about 1.5 s
RATE_DECAY = 0.8


@dataclass(frozen=True)
class Downstream:
    """What the node's downloader holds and can take, as the scheduler sees it."""

    #: requests handed to the engine and not on the wire yet (download gate, slot queues)
    not_started: int = 0
    #: requests the downloader could put on the wire now, within its limits and delays
    room: int = 0
    #: requests the downloader runs at once over the sites it has, within its limits (a site
    #: with a delay counts one): the target is never below it
    capacity: int = 1


#: measures the node's downloader (plugin/lease_demand.py); None: nothing to measure (tests)
Measure = Callable[[], Downstream]


class LeaseSizer:
    """The prefetch target of one node (see the module doc), up to ``maximum``; 0: lease
    nothing more now."""

    def __init__(self, maximum: int, initial: int, measure: Measure | None = None,
                 clock: Callable[[], float] = time.monotonic, fixed: bool = False) -> None:
        self.maximum = maximum
        #: ``CLUSTERSYNC_PREFETCH`` set: ``maximum`` ahead, what the engine took and did not
        #: start included (a polite site's requests held at the gate are leased ahead too)
        self.fixed = fixed
        self.target = max(1, min(maximum, initial))
        self.measure = measure
        self._clock = clock
        self._next_look = 0.0
        #: the downloader as of the last look, followed since (``refresh``)
        self._seen = Downstream(capacity=self.target)
        self._horizon_starts = 0  # what the node starts over the horizon, at its rate
        self._window_start = clock()
        self._started = 0  # requests started since the window started
        self._rate = 0.0  # requests started per second, averaged

    def refresh(self, round_trip_s: float, handing_out: bool = False,
                starting: bool = False) -> bool:
        """Size the target again; True if it changed. ``handing_out``: an entry is being handed
        to the engine (the downloader does not hold it yet); ``starting``: a request goes on to
        the downloader (``request_reached_downloader``: the download gate let it through, its
        site's turn came). The rate counts these starts, not the engine's takes: the engine
        takes up to ``CONCURRENT_REQUESTS`` at once to hold them at the gate, and a rate of
        takes would size a lease by that burst, taking work the other nodes could start now.

        The downloader is looked at every ``REFRESH_S`` at most; in between, what it holds is
        followed from these: an entry handed out is one more not started, a request that starts
        one fewer, and takes one of the room. With Redis near, the engine takes, the Redis
        thread leases and the engine takes again many times within ``REFRESH_S``: a target that
        waited for the next look would lease as many times. A target of 0 is never kept without
        a look, though: requests may have ended since without starting (dropped by an earlier
        middleware), and nothing else would size it again."""
        if self.measure is None:
            return False
        now = self._clock()
        if now >= self._next_look or self._wanted() <= 0:
            self._look(now, round_trip_s)
        if handing_out or starting:  # (built whole: ``dataclasses.replace`` costs far more)
            seen = self._seen
            not_started, room = seen.not_started, seen.room
            if handing_out:
                not_started += 1
            if starting:
                self._started += 1
                not_started, room = max(0, not_started - 1), max(0, room - 1)
            self._seen = Downstream(not_started, room, seen.capacity)
        target = max(0, min(self.maximum, self._wanted()))
        if abs(target - self.target) <= TARGET_SLACK * self.target:
            return False  # not worth a message: the thread leases from half of it anyway
        self.target = target
        return True

    def _wanted(self) -> int:
        """What the node can start before the next lease, less what it holds not started."""
        seen = self._seen
        if self.fixed:
            return self.maximum - seen.not_started
        return max(seen.capacity, seen.room + self._horizon_starts) - seen.not_started

    def _look(self, now: float, round_trip_s: float) -> None:
        assert self.measure is not None
        self._next_look = now + REFRESH_S
        self._update_rate(now)
        self._seen = self.measure()
        horizon_s = max(MIN_HORIZON_S, HORIZON_ROUND_TRIPS * round_trip_s + LINGER_S)
        self._horizon_starts = math.ceil(self._rate * horizon_s)

    def _update_rate(self, now: float) -> None:
        elapsed = now - self._window_start
        if elapsed < RATE_WINDOW_S / 4:
            return
        # a node that starves takes less: its rate must not fall as fast as it was measured,
        # or a short lease would make the next one shorter still
        decayed = self._rate * RATE_DECAY ** (elapsed / RATE_WINDOW_S)
        self._rate = max(self._started / elapsed, decayed)
        self._window_start, self._started = now, 0
