"""ControlFollower: how a node follows the job's control state (``clustersync pause|resume|stop``).

The state lives in Redis (the job's meta field ``control``, changed by ``control.lua``). The node's
Redis thread calls ``listen`` on every turn of its loop (at least every ``FOLLOW_INTERVAL_S``): it
applies what the job's control channel said since (a subscription on a connection of its own, read
without waiting); and it re-reads the field every ``REREAD_S``, in the round trip of the turn's
other calls (``read_in``, ``answered``), so that a node that missed a message (a dropped connection,
a node that joined meanwhile) converges within that time. The same read and channel carry the job's
shared-settings version (``settings_version``; a "settings <N>" message is no control state), and
the sites some node found slowed down (a "site ..." message, site_slow_down.lua:
``take_sites_slowed``; no control state either). The subscription is read on a thread of its own,
which calls ``on_heard`` as a message comes (the Redis thread passes its wake-up, so it hands a
slow-down on at once). Until it subscribed (its thread subscribes when it has the time: see
``SyncWorker._subscribe_if_free``) it re-reads in every round trip that goes anyway, up to every
``FOLLOW_INTERVAL_S``. ``follow`` does both, the read a call of its own. When Redis is away it keeps
the last state it knew and subscribes again quietly. The thread holds leasing while the job does not
run and hands the state to the reactor in its ``NodeView``; the control extension
(plugin/job_control.py) acts on it there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store import StoreError
from ..store.control_state import (
    PAUSED,
    RUNNING,
    STOPPED,
    STOPPING,
    ControlState,
    ControlSubscription,
    heard_settings_version,
    heard_site_slowed,
)
from ..store.errors import AccessRefused

if TYPE_CHECKING:
    from ..store.control_state import ControlStore
    from ..store.round_trip import Answer, RoundTrip

logger = logging.getLogger(__name__)

#: how often the state is read again, whatever the channel said (a missed message is applied
#: within this time; the job control promise is 1 s)
REREAD_S = 0.5
#: the longest the Redis thread sleeps between two looks at the control channel
FOLLOW_INTERVAL_S = 0.2
#: wait before subscribing again after Redis went away
RECONNECT_S = 1.0

__all__ = ["FOLLOW_INTERVAL_S", "PAUSED", "REREAD_S", "RUNNING", "STOPPED", "STOPPING",
           "ControlFollower"]


class ControlFollower:
    """The job's control state as this node knows it (None until first read); used by the
    node's Redis thread alone."""

    def __init__(self, control: ControlStore, job: str, reread_s: float = REREAD_S,
                 on_heard: Callable[[], None] | None = None) -> None:
        self._control = control
        self._on_heard = on_heard
        #: sites heard slowed down (429/503 on some node) since ``take_sites_slowed``
        self._sites_slowed: list[str] = []
        self.job = job
        self._reread_s = reread_s
        self.state: str | None = None
        #: the close reason a CLOSESPIDER_* limit stopped the job with ("": none)
        self.reason = ""
        #: the job's shared-settings version as last read or heard (0: none yet); the node
        #: reads the settings again whenever it differs from the version it applies
        self.settings_version = 0
        self._subscription: ControlSubscription | None = None
        self._next_read = 0.0
        self._subscribe_at = 0.0
        self._channel_refused = False  # NOPERM on SUBSCRIBE: follow by re-reading only

    def follow(self, now: float) -> None:
        """Apply what the channel said since the last call and re-read the state when due (a
        call of its own). Never raises: Redis away, it tries again after ``RECONNECT_S``."""
        self.listen(now)
        if now >= self._next_read:
            self._next_read = now + self._reread_s
            self._guarded(lambda: self._control.read(), now)

    def listen(self, now: float, connect: bool = True) -> None:
        """Apply what the channel said since the last call (no round trip: what came is read
        without waiting), subscribing first when due and ``connect`` allows it: a subscription
        opens a connection of its own, whose handshake takes a few round trips (the re-read
        covers the state meanwhile). Never raises."""
        self._guarded(lambda: self._listen_if_allowed(now, connect), now)

    def subscription_due(self, now: float) -> bool:
        """``listen`` would subscribe now, if allowed to connect."""
        return (self._subscription is None and not self._channel_refused
                and now >= self._subscribe_at)

    def read_in(self, trip: RoundTrip, now: float) -> Answer[ControlState] | None:
        """The re-read of the state, in ``trip``, when due (``answered`` applies it): every
        ``REREAD_S``; and without a subscription, whenever ``trip`` holds other calls (it costs
        no round trip then), up to every ``FOLLOW_INTERVAL_S``."""
        riding = (self._subscription is None and len(trip) > 0
                  and now >= self._next_read - self._reread_s + FOLLOW_INTERVAL_S)
        if now < self._next_read and not riding:
            return None
        self._next_read = now + self._reread_s
        return self._control.read_in(trip)

    def answered(self, answer: Answer[ControlState], now: float) -> None:
        """Apply the re-read ``read_in`` added to a round trip. Never raises."""
        self._guarded(answer.result, now)

    def _guarded(self, action: Callable[[], ControlState | None], now: float) -> None:
        try:
            read = action()
        except StoreError as exc:  # Redis away: the heartbeat says so; retry quietly
            logger.debug("clustersync: job control channel of %r lost (%s); retrying",
                         self.job, exc)
            self._drop(now)
        except Exception:  # a bug must not stop the node from following
            logger.warning("clustersync: unexpected error following the control state of "
                           "job %r; retrying", self.job, exc_info=True)
            self._drop(now)
        else:
            if read is not None:
                self.state, self.reason = read.state, read.reason
                self.settings_version = read.settings_version

    def _listen_if_allowed(self, now: float, connect: bool = True) -> None:
        """Listen on the channel, unless this client may not subscribe (an ACL user without
        pub/sub permission): then the node follows by re-reading alone, within REREAD_S."""
        if self._channel_refused:
            return
        try:
            self._listen(now, connect)
        except AccessRefused as exc:
            self._channel_refused = True
            self.close()
            logger.info("clustersync: this node may not subscribe to the control channel of job "
                        "%r (%s); it reads the job's control state every %gs instead",
                        self.job, exc, self._reread_s)

    def joined(self, state: str, now: float) -> None:
        """The join read the state (``state``) just now: use it, read it again in
        ``REREAD_S`` and subscribe then, not before the node's first writes and lease (a
        change published meanwhile is read then)."""
        self.state = state
        self._next_read = self._subscribe_at = now + self._reread_s

    def _listen(self, now: float, connect: bool) -> None:
        if self._subscription is None:
            if now < self._subscribe_at or not connect:
                return
            self._subscription = self._control.subscribe(self._on_heard)
            self._next_read = now  # a change made while the node was not subscribed
        while (heard := self._subscription.wait(0)) is not None:
            version = heard_settings_version(heard)
            site = heard_site_slowed(heard)
            if site is not None:  # a site slowed down, not a control state
                self._sites_slowed.append(site)
            elif version is not None:  # a new version of the shared settings, not a control state
                self.settings_version = max(self.settings_version, version)
            elif (state := ControlState.heard(heard)) is not None:
                self.state, self.reason = state.state, state.reason

    def take_sites_slowed(self) -> list[str]:
        """The sites heard slowed down since the last call (each once, in order heard)."""
        sites, self._sites_slowed = list(dict.fromkeys(self._sites_slowed)), []
        return sites

    def _drop(self, now: float) -> None:
        self.close()
        self._subscribe_at = now + RECONNECT_S

    @property
    def allows_downloads(self) -> bool:
        """True while the job runs: a paused or stopping job hands out no new request."""
        return self.state == RUNNING

    def settle(self) -> None:
        """The node left the job: a stop it held up is settled (the last node to leave turns
        ``stopping`` into ``stopped``). Never raises: the node is closing."""
        if self.state in (STOPPING, STOPPED):
            try:
                self._control.change("settle")
            except StoreError as exc:
                logger.debug("clustersync: could not settle the stop of job %r: %s", self.job, exc)

    def close(self) -> None:
        """Drop the subscription (never raises)."""
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None
