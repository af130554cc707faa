"""The Redis thread's side of the site calls (node/site_calls.py), with a fake store: asks of
one site merged until sent, sent again after a failed round trip, their offsets turned into the
node's clock, and a refused call answered with a time to ask again."""

from __future__ import annotations

import time
from typing import Any

import pytest

from scrapy_clustersync.node.site_calls import REFUSED_RETRY_S, SiteCallsPart, merged
from scrapy_clustersync.node.thread_messages import SlowDown, WantTurns
from scrapy_clustersync.store.errors import StoreError
from scrapy_clustersync.store.site_scripts import SlowedDown, Turns, TurnsAsk

#: the round trip the calls go in: the fake store adds nothing to it
TRIP: Any = object()


class FakeAnswer:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class FakeSites:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.reply: Any = Turns((0.5, 1.0), ("", ""), 0.5, 0.0, None)

    def turns_in(self, trip: Any, ask: TurnsAsk) -> FakeAnswer:
        self.sent.append(ask)
        return FakeAnswer(self.reply)

    def slow_down_in(self, trip: Any, site: str, retry: float | None, delay: float) -> FakeAnswer:
        self.sent.append((site, retry))
        return FakeAnswer(SlowedDown(retry or 0.0, 0.0))


class Part(SiteCallsPart):
    def __init__(self) -> None:
        self.store: Any = type("Store", (), {"sites": FakeSites()})()
        self.posted: list[tuple[str, Any]] = []
        self._post = lambda function, site, turns: self.posted.append((site, turns))
        self._link: Any = type("Link", (), {"turns_reserved": None})()
        self._init_site_calls()


def ask(site: str = "a.com", count: int = 1, good: int = 0, done: tuple[str, ...] = ()
        ) -> TurnsAsk:
    return TurnsAsk(site, count, 0.5, 0.0, 1, 0.25, 0, 60.0, good, done)


def test_asks_of_one_site_not_sent_yet_are_merged() -> None:
    merged_ask = merged(ask(count=2, good=1, done=("t1",)), ask(count=5, good=2, done=("t2",)))
    assert (merged_ask.count, merged_ask.good, merged_ask.done) == (5, 3, ("t1", "t2"))


def test_slow_downs_go_first_and_the_offsets_land_on_the_nodes_clock() -> None:
    part = Part()
    part._want_turns(WantTurns(ask()), 0.0)
    part._slow_down(SlowDown("b.com", 3.0, 0.5), 0.0)
    calls = part._site_calls_in(TRIP)
    assert part.store.sites.sent[0] == ("b.com", 3.0)
    before = time.monotonic()
    part._site_calls_answered(calls, took_s=0.2)
    ((site, turns),) = part.posted
    assert site == "a.com"
    assert turns.starts[0] == pytest.approx(before - 0.1 + 0.5, abs=0.05)
    assert turns.starts[1] - turns.starts[0] == pytest.approx(0.5)


def test_an_ask_whose_round_trip_failed_is_sent_again_and_nothing_while_closing() -> None:
    part = Part()
    part._want_turns(WantTurns(ask(done=("t1",))), 0.0)
    part._site_calls_in(TRIP)  # the round trip fails: never answered
    assert part._site_calls_in(TRIP, closing=True) is None
    calls = part._site_calls_in(TRIP)
    assert calls is not None and [a.done for a, _ in calls.asks] == [("t1",)]


def test_a_call_redis_refused_answers_no_turn_and_a_time_to_ask_again() -> None:
    part = Part()
    part.store.sites.reply = StoreError("wrong type")
    part._want_turns(WantTurns(ask()), 0.0)
    part._site_calls_answered(part._site_calls_in(TRIP), took_s=0.01)
    ((_, turns),) = part.posted
    assert turns.starts == () and turns.retry_at is not None
    assert turns.retry_at - time.monotonic() == pytest.approx(REFUSED_RETRY_S, abs=0.1)
