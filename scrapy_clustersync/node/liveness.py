"""How long a node stays alive without a heartbeat: the threshold, plus an allowance for its
own distance from Redis.

A node is declared dead once its liveness deadline has passed (heartbeat.lua); each heartbeat,
and the join before the first, sets that deadline. ``CLUSTERSYNC_NODE_DEAD_AFTER`` alone was
too short for a node far from Redis: between its join and its first heartbeat it makes about
ten round trips (the risk checks, the spool replay, the control channel, the first load of its
scripts), and between two heartbeats its Redis thread makes several more (a flush, a lease, the
control read, each with a script load the first time). At 0.2 s each way that is 4 s and 2 s,
more than a 1.5 s threshold: such a node was declared dead while it started, its start() claim
taken over while it ran start() (start() twice), and again while it crawled.

The rule, applied by the node to the liveness it asks for (no script changes):
- the join counts as the first heartbeat, with a deadline that covers the start-up: the
  threshold plus ``START_UP_ROUND_TRIPS`` times the node's call before its join, timed on an
  open connection (at least the
  threshold once more, at most ``START_UP_MAX_S``); a spool replay renews it between batches
  (``StartUpLiveness.renew``), however long the spool;
- every heartbeat asks for the threshold plus ``TURN_ROUND_TRIPS`` times the node's round
  trip: the shortest of its last few heartbeat calls (a busy moment makes one call slow, never
  the network fast; before the first, the call before its join), at most
  ``TURN_ALLOWANCE_MAX`` thresholds.

A node near Redis (calls of a millisecond) gets the threshold, as before, from its first
heartbeat on; one that dies between its join and its first heartbeat is declared dead after
twice the threshold. A far node is declared dead a few of its own round trips later than the
threshold: failover stays in seconds.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import ClusterConfig
    from ..store import JobStore

logger = logging.getLogger(__name__)

#: the round trips between a join and the first heartbeat that the join's deadline covers,
#: counted in the call the node measures before it joins (itself one to several round trips,
#: as it opens the connection): about ten are made, and there is room for a busy machine
START_UP_ROUND_TRIPS = 10
#: the most a join's start-up allowance may be (unless the threshold is longer)
START_UP_MAX_S = 30.0
#: the round trips a turn of the Redis thread may make between two heartbeats (a flush, a
#: lease, the control read, Bloom upkeep, a script load each the first time), counted in the
#: node's round trip (its shortest recent heartbeat call)
TURN_ROUND_TRIPS = 8
#: the most a heartbeat's allowance may be, in thresholds (a momentarily slow Redis)
TURN_ALLOWANCE_MAX = 3


def start_up_ttl_ms(config: ClusterConfig, measured_call_s: float) -> int:
    """The liveness the join gives the node: the threshold, plus its start-up allowance
    (``START_UP_ROUND_TRIPS`` times ``measured_call_s``, the time of the node's call before the
    join, at least the threshold, at most ``START_UP_MAX_S`` or the threshold)."""
    dead_after_s = config.node_dead_after_s
    allowance_s = min(max(dead_after_s, START_UP_MAX_S),
                      max(dead_after_s, START_UP_ROUND_TRIPS * max(0.0, measured_call_s)))
    return int((dead_after_s + allowance_s) * 1000)


def heartbeat_ttl_ms(config: ClusterConfig, round_trip_s: float) -> int:
    """The liveness a heartbeat asks for: the threshold plus ``TURN_ROUND_TRIPS`` times
    ``round_trip_s``, the node's round trip (at most ``TURN_ALLOWANCE_MAX`` thresholds)."""
    dead_after_s = config.node_dead_after_s
    allowance_s = min(TURN_ALLOWANCE_MAX * dead_after_s,
                      TURN_ROUND_TRIPS * max(0.0, round_trip_s))
    return int((dead_after_s + allowance_s) * 1000)


class StartUpLiveness:
    """Keeps a node that joined alive until its first heartbeat, through a long spool replay:
    ``measured`` sets the join's liveness (``ttl_ms``); ``renew`` joins again (the same node,
    claiming nothing) at most once per heartbeat interval, which pushes its deadline
    ``ttl_ms`` past now."""

    def __init__(self, store: JobStore, config: ClusterConfig) -> None:
        self._store = store
        self._config = config
        self.ttl_ms = start_up_ttl_ms(config, 0.0)
        #: how long the node's call before its join took (its distance from Redis)
        self.call_s = 0.0
        self._renewed_at = time.monotonic()

    def measured(self, call_s: float) -> int:
        """The liveness the join gives, for a call before it that took ``call_s``."""
        self.call_s = call_s
        self.ttl_ms = start_up_ttl_ms(self._config, call_s)
        self._renewed_at = time.monotonic()
        return self.ttl_ms

    def renew(self) -> None:
        """Renew the deadline if a heartbeat interval passed since the join or the last renewal.
        Raises StoreError as any call does (the replay then stops, its file kept)."""
        now = time.monotonic()
        if now - self._renewed_at < self._config.heartbeat_interval_s:
            return
        self._renewed_at = now
        self._store.join_node(self.ttl_ms, claim=False, recrawl="join")
        logger.debug("clustersync: node %s renewed its start-up liveness (%d ms)",
                     self._config.node_id, self.ttl_ms)
