"""``site_turns.lua`` and ``site_slow_down.lua``: one politeness budget per site for the whole
cluster, on the Redis clock (GCRA), and ``SiteStore``, the node's calls of them in a round trip.

A reservation answers offsets from the Redis clock's "now" when the script ran; the node turns
them into its own ``time.monotonic()`` with the round trip's time (node/site_calls.py): the
script ran between the send and the answer, taken as half way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .cluster_client import queue_server_time
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text
from .round_trip import Answer, RoundTrip
from .script_base import JobScript

#: a site's keys expire this long after its last turn (a broad crawl's sites stay bounded)
SITE_IDLE_MS = 600_000
#: the longest backoff of a site that answers 503 (or 429) without a Retry-After
BACKOFF_MAX_MS = 60_000


@dataclass(frozen=True)
class TurnsAsk:
    """What a node asks of one site's budget (site_turns.lua's header has each field)."""

    site: str
    count: int
    delay_s: float
    jitter: float
    seed: int
    horizon_s: float
    cap: int
    lease_s: float
    good: int = 0
    done: tuple[str, ...] = ()


@dataclass(frozen=True)
class Turns:
    """Turns reserved: ``offsets_s`` from the Redis clock's now when they were (with their
    in-flight ``tokens``, "" without a cap); ``step_s``: the site's delay in force (its backoff
    if longer); ``retry_s``: with the cap full, when a slot frees at the latest (None: not
    full); ``blocked_s``: how long the site is still blocked (a Retry-After; 0: not)."""

    offsets_s: tuple[float, ...]
    tokens: tuple[str, ...]
    step_s: float
    backoff_s: float
    retry_s: float | None
    server_ms: int = 0  # the Redis clock when they were reserved
    blocked_s: float = 0.0


@dataclass(frozen=True)
class SlowedDown:
    """A site slowed down: blocked for ``blocked_s`` from now (0: not), backoff in force."""

    blocked_s: float
    backoff_s: float


class SiteTurnsScript(JobScript):
    """site_turns.lua for one node."""

    FILE = "site_turns"
    KEYS = ("site", "inflight", "sites")
    ARGV = ("site", "node", "count", "delay_ms", "jitter", "seed", "horizon_ms", "cap",
            "lease_ms", "idle_ms", "good")
    ARGV_TAIL = "done"

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        super().__init__(client, keys)
        self.node_id = node_id

    def call(self, ask: TurnsAsk) -> tuple[list[str], list[Any]]:
        k = self.keys
        return [k.site(ask.site), k.site_inflight(ask.site), k.sites], [
            ask.site, self.node_id, max(0, ask.count), round(ask.delay_s * 1000, 3), ask.jitter,
            ask.seed, round(ask.horizon_s * 1000), ask.cap, round(ask.lease_s * 1000),
            SITE_IDLE_MS, ask.good, *ask.done]

    def parse(self, reply: Any) -> Turns:
        now, step, backoff, retry, blocked, *flat = reply
        return Turns(tuple(float(as_text(flat[i])) / 1000 for i in range(0, len(flat), 2)),
                     tuple(as_text(flat[i]) for i in range(1, len(flat), 2)),
                     float(as_text(step)) / 1000, float(as_text(backoff)) / 1000,
                     None if int(retry) < 0 else int(retry) / 1000, int(now),
                     max(0.0, float(as_text(blocked)) / 1000))

    def run(self, ask: TurnsAsk) -> Turns:
        return self.parse(self._call(*self.call(ask)))


class SiteSlowDownScript(JobScript):
    """site_slow_down.lua."""

    FILE = "site_slow_down"
    KEYS = ("site", "sites")
    ARGV = ("site", "retry_ms", "delay_ms", "backoff_max_ms", "idle_ms", "channel")

    def call(self, site: str, retry_after_s: float | None, delay_s: float
             ) -> tuple[list[str], list[Any]]:
        retry_ms = -1 if retry_after_s is None else max(0, round(retry_after_s * 1000))
        return [self.keys.site(site), self.keys.sites], [
            site, retry_ms, round(delay_s * 1000, 3), BACKOFF_MAX_MS, SITE_IDLE_MS,
            self.keys.control_channel]

    def parse(self, reply: Any) -> SlowedDown:
        _now, blocked, backoff = reply
        return SlowedDown(int(blocked) / 1000, float(as_text(backoff)) / 1000)

    def run(self, site: str, retry_after_s: float | None, delay_s: float) -> SlowedDown:
        return self.parse(self._call(*self.call(site, retry_after_s, delay_s)))


class SiteStore:
    """The site scripts of one node, alone (``turns``, ``slow_down``) or in a round trip."""

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str) -> None:
        self.client = client
        self._turns = SiteTurnsScript(client, keys, node_id)
        self._slow_down = SiteSlowDownScript(client, keys)

    def turns(self, ask: TurnsAsk) -> Turns:
        """Reserve turns of ``ask.site`` (freeing ``ask.done`` first)."""
        return self._turns.run(ask)

    def slow_down(self, site: str, retry_after_s: float | None, delay_s: float) -> SlowedDown:
        """``site`` answered 429/503: block it ``retry_after_s`` (None: back off)."""
        return self._slow_down.run(site, retry_after_s, delay_s)

    def turns_in(self, trip: RoundTrip, ask: TurnsAsk) -> Answer[Turns]:
        """``turns`` in ``trip``."""
        keys, args = self._turns.call(ask)
        return _add(trip, self._turns, keys, args, Answer(
            self.client, self._turns.parse, lambda: self.turns(ask)))

    def slow_down_in(self, trip: RoundTrip, site: str, retry_after_s: float | None,
                     delay_s: float) -> Answer[SlowedDown]:
        """``slow_down`` in ``trip``."""
        keys, args = self._slow_down.call(site, retry_after_s, delay_s)
        return _add(trip, self._slow_down, keys, args, Answer(
            self.client, self._slow_down.parse,
            lambda: self.slow_down(site, retry_after_s, delay_s)))


def _add(trip: RoundTrip, script: JobScript, keys: Sequence[str], args: list[Any],
         answer: Answer[Any]) -> Answer[Any]:
    return trip.add(lambda pipe: script.queue(pipe, keys, args), answer, ran=script.sent)


#: sites ``clustersync status --sites`` shows unless told
SITES_SHOWN = 20


@dataclass(frozen=True)
class SiteStatus:
    """One site's budget as Redis holds it now: the delay in force (its backoff if longer),
    requests under way (with a cap), seconds until its next turn and until its block ends."""

    site: str
    delay_s: float
    backoff_s: float
    in_flight: int
    next_turn_s: float
    blocked_s: float
    idle_s: float


def read_sites(client: redis.Redis, keys: JobKeys, limit: int = SITES_SHOWN
               ) -> tuple[int, list[SiteStatus]]:
    """How many sites the job has in use, and the ``limit`` used last, newest first (read
    only: two round trips whatever ``limit``)."""
    with translate_errors(client):
        pipe = client.pipeline(transaction=False)
        queue_server_time(pipe, keys.sites)
        pipe.zcard(keys.sites)
        pipe.zrevrange(keys.sites, 0, limit - 1, withscores=True)
        (seconds, micros), total, named = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        pipe = client.pipeline(transaction=False)
        for site, _ in named:
            pipe.hgetall(keys.site(as_text(site)))
            pipe.zcount(keys.site_inflight(as_text(site)), now_ms, "+inf")
        replies = pipe.execute()
    shown = []
    for i, (site, last_ms) in enumerate(named):
        state = {as_text(k): float(as_text(v)) for k, v in replies[2 * i].items()
                 if as_text(k) != "waiter"}
        shown.append(SiteStatus(
            as_text(site), state.get("delay_ms", 0.0) / 1000, state.get("backoff_ms", 0.0) / 1000,
            int(replies[2 * i + 1]), max(0.0, state.get("tat_ms", now_ms) - now_ms) / 1000,
            max(0.0, state.get("blocked_ms", 0.0) - now_ms) / 1000, (now_ms - last_ms) / 1000))
    return int(total), shown
