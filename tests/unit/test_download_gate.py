"""The download gate on Scrapy's own download slots, without a crawl: what goes on at once, what
waits and in which order, that a delay is waited once, and what a stop hands back."""

from __future__ import annotations

import asyncio
from collections import Counter
from time import monotonic
from typing import Any

import pytest
from scrapy import Request
from scrapy.core.downloader import Slot
from scrapy.exceptions import IgnoreRequest
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from scrapy_clustersync.codec import LEASE_META_KEY
from scrapy_clustersync.plugin.download_gate import DownloadGate
from scrapy_clustersync.plugin.lease_tracker import LeaseTracker
from scrapy_clustersync.store.control_state import PAUSED, RUNNING, STOPPING
from scrapy_clustersync.store.write_ops import Op, Release

SITE = "example.com"


class FakeDownloader:
    """What the gate reads of Scrapy's downloader: its slots, their keys, its active set."""

    def __init__(self, slot: Slot) -> None:
        self.slots = {SITE: slot}
        self.active: set[Request] = set()

    def get_slot_key(self, request: Request) -> str:
        return SITE


class FakeIo:
    def __init__(self, control: str = RUNNING) -> None:
        self.control = control

    @property
    def allows_downloads(self) -> bool:
        return self.control == RUNNING

    def listen(self, callback: Any) -> None:
        pass


class FakeNode:
    def __init__(self, io: FakeIo) -> None:
        self.io = io
        self.sent: list[Op] = []
        self.counts: Counter[str] = Counter()
        self.leases = LeaseTracker(lambda: self.sent.append, self.counts)
        self.started: list[Request] = []
        self.gate_tells_starts = False

    def request_started(self, request: Request) -> None:
        self.started.append(request)


def gate_on(slot: Slot, control: str = RUNNING) -> tuple[DownloadGate, FakeDownloader, FakeNode]:
    from twisted.internet import reactor  # noqa: F401  (a crawl has one: the gate awaits on it)

    crawler = get_crawler()
    crawler.stats = MemoryStatsCollector(crawler)
    gate = DownloadGate(crawler)
    downloader = FakeDownloader(slot)
    gate._downloader = downloader  # type: ignore[assignment]
    node = FakeNode(FakeIo(control))
    gate.node = node  # type: ignore[assignment]
    return gate, downloader, node


def leased(url: str, node: FakeNode, priority: int = 0) -> Request:
    request = Request(url, priority=priority)
    node.leases.handed_out(request, f"entry-{url}")
    return request


def outcome(awaitable: Any) -> list[Any]:
    """The result the gate's awaitable ends with, once it ends (a list, empty until then)."""
    ended: list[Any] = []
    Deferred.fromCoroutine(awaitable).addCallback(ended.append)
    return ended


def start_transfer(gate: DownloadGate, slot: Slot, request: Request) -> None:
    """What Scrapy does with a request the gate let through: it reaches its slot and starts."""
    request.meta["download_slot"] = SITE
    gate._reached_slot(request)
    slot.transferring.add(request)
    slot.lastseen = monotonic()


def test_a_request_whose_slot_is_free_goes_on_at_once_without_a_deferred() -> None:
    # given a gate before a free slot with no delay
    slot = Slot(concurrency=8, delay=0, jitter=0)
    gate, _, node = gate_on(slot)
    # when requests arrive
    answers = [gate.process_request(leased(f"https://{SITE}/{i}", node)) for i in range(8)]
    # then each goes on at once: None, nothing awaited, nothing held
    assert answers == [None] * 8 and len(gate.held) == 0


def test_held_requests_go_in_priority_then_arrival_order_as_transfers_end() -> None:
    # given a slot of one transfer, busy
    slot = Slot(concurrency=1, delay=0, jitter=0)
    gate, _, node = gate_on(slot)
    slot.transferring.add(Request(f"https://{SITE}/busy"))
    # when three requests arrive, the second of a higher priority
    first, urgent, last = (leased(f"https://{SITE}/{name}", node, priority)
                           for name, priority in (("first", 0), ("urgent", 5), ("last", 0)))
    ended = {r.url: outcome(gate.process_request(r)) for r in (first, urgent, last)}
    # then all three wait
    assert all(result == [] for result in ended.values())
    # and each transfer that ends lets the next one go: priority first, then arrival
    order = []
    for _ in range(3):
        slot.transferring.clear()
        gate._left_downloader(Request("https://other/"))
        gone = [url for url, result in ended.items() if result == [None] and url not in order]
        assert len(gone) == 1
        order.append(gone[0])
        start_transfer(gate, slot, next(r for r in (first, urgent, last) if r.url == gone[0]))
    assert order == [urgent.url, first.url, last.url]


def test_on_asyncio_a_held_request_waits_on_a_future_that_ends_when_a_transfer_ends() -> None:
    async def crawl() -> tuple[bool, Any]:
        # given a slot of one transfer, busy, on a running asyncio loop
        slot = Slot(concurrency=1, delay=0, jitter=0)
        gate, _, node = gate_on(slot)
        slot.transferring.add(Request(f"https://{SITE}/busy"))
        # when a request arrives, it waits
        turn = gate.process_request(leased(f"https://{SITE}/next", node))
        waited = isinstance(turn, asyncio.Future) and not turn.done()
        # and when the transfer ends, it goes on
        slot.transferring.clear()
        gate._left_downloader(Request("https://other/"))
        return waited, await asyncio.wait_for(turn, 1.0)

    assert asyncio.run(crawl()) == (True, None)


def test_each_request_reaching_its_slot_is_told_the_scheduler_for_the_lease_size() -> None:
    # given a gate before a free slot
    slot = Slot(concurrency=8, delay=0, jitter=0)
    gate, _, node = gate_on(slot)
    requests = [leased(f"https://{SITE}/{i}", node) for i in range(3)]
    # when each goes on and reaches its slot, and one more arrives there past the gate
    for request in requests:
        assert gate.process_request(request) is None
        start_transfer(gate, slot, request)
    start_transfer(gate, slot, Request(f"https://{SITE}/direct"))
    # then the scheduler hears of every start
    assert [r.url for r in node.started] == [*(r.url for r in requests), f"https://{SITE}/direct"]


def test_a_request_started_but_not_on_the_wire_yet_keeps_its_room_in_the_slot() -> None:
    # given a slot of one transfer and a request let through that reached it and that Scrapy
    # started (in the slot) but did not put on the wire yet: it does so a turn later
    slot = Slot(concurrency=1, delay=0, jitter=0)
    gate, _, node = gate_on(slot)
    first = leased(f"https://{SITE}/first", node)
    assert gate.process_request(first) is None
    first.meta["download_slot"] = SITE
    slot.active.add(first)
    gate._reached_slot(first)
    # when a second request arrives, it waits at the gate (not in the slot's queue)
    answer = gate.process_request(leased(f"https://{SITE}/second", node))
    assert answer is not None
    ended = outcome(answer)
    slot.transferring.add(first)
    gate.wake()
    assert ended == [] and len(gate.held) == 1
    # and when the first is done, the second goes on
    slot.transferring.discard(first)
    slot.active.discard(first)
    gate._left_downloader(first)
    assert ended == [None]


class ShortFirstDraw(Slot):
    """Scrapy's slot, whose first jittered delay drawn is short (0.6 of 1 s)."""

    drawn = 0

    def download_delay(self) -> float:
        self.drawn += 1
        return 0.6 if self.drawn == 1 else super().download_delay()


def test_the_delay_is_waited_once_at_the_gate_and_not_drawn_again_in_the_slot() -> None:
    # given a slot with Scrapy's jittered delay (0.5-1.5 s) whose last start was 1 s ago, and
    # whose delay for this gap was drawn short (0.6 s)
    slot = ShortFirstDraw(concurrency=1, delay=1.0, jitter=0.5)
    gate, _, node = gate_on(slot)
    slot.lastseen = monotonic() - 1.0
    request = leased(f"https://{SITE}/page", node)
    # when the gate lets a request through and it reaches its slot
    assert gate.process_request(request) is None
    request.meta["download_slot"] = SITE
    gate._reached_slot(request)
    # then Scrapy's own check (_process_queue) finds no delay left, whatever it draws
    for _ in range(200):
        assert slot.download_delay() - monotonic() + slot.lastseen <= 0


def test_a_request_right_after_a_start_waits_for_its_delay() -> None:
    # given a slot that started a request just now
    slot = Slot(concurrency=4, delay=1.0, jitter=0.5)
    gate, _, node = gate_on(slot)
    slot.lastseen = monotonic()
    # when a request arrives
    ended = outcome(gate.process_request(leased(f"https://{SITE}/next", node)))
    # then it waits at the gate, not in the slot's queue
    assert ended == [] and len(gate.held) == 1 and not slot.queue


def test_a_paused_job_holds_every_request_until_it_runs_again() -> None:
    # given a paused job and a free slot
    slot = Slot(concurrency=8, delay=0, jitter=0)
    gate, _, node = gate_on(slot, PAUSED)
    ended = [outcome(gate.process_request(leased(f"https://{SITE}/{i}", node))) for i in range(3)]
    assert ended == [[], [], []]
    # when it is resumed
    node.io.control = RUNNING
    gate.wake()
    # then every held request goes on
    assert ended == [[None], [None], [None]]


def test_a_stop_hands_held_requests_back_to_the_queue_without_downloading_them(
) -> None:
    # given requests held while the job is paused
    slot = Slot(concurrency=8, delay=0, jitter=0)
    gate, _, node = gate_on(slot, PAUSED)
    held = [leased(f"https://{SITE}/{i}", node) for i in range(2)]
    ended = [outcome(gate.process_request(request)) for request in held]
    # when the job is stopped
    node.io.control = STOPPING
    gate.wake()
    # then each ends with the request itself (not a download), its lease released, not acked
    assert ended == [[held[0]], [held[1]]]
    assert node.sent == [Release(r.meta[LEASE_META_KEY]) for r in held]
    assert not node.leases.inflight
    # and the engine's crawl() of it is dropped, once
    with pytest.raises(IgnoreRequest):
        gate._scheduled(held[0])
    gate._scheduled(held[0])  # the same request scheduled again later is not dropped


class AnswersSeen:
    """Wraps the gate's turns: the statuses it is told came from the site."""

    def __init__(self, turns: Any) -> None:
        self._turns = turns
        self.answers: list[int] = []

    def answered(self, key: str, status: int, headers: Any) -> None:
        self.answers.append(status)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._turns, name)


def test_only_a_response_from_the_site_itself_can_slow_the_site_down() -> None:
    # given a gate whose turns record the answers said to come from the site
    slot = Slot(concurrency=8, delay=0, jitter=0)
    gate, _, node = gate_on(slot)
    seen = AnswersSeen(gate.turns)
    gate.turns = seen
    from scrapy.http import HtmlResponse
    # when a later middleware (or the HTTP cache) answers 503 before the request reaches its slot
    cached = leased(f"https://{SITE}/cached", node)
    assert gate.process_request(cached) is None
    gate.process_response(cached, HtmlResponse(cached.url, status=503))
    # and the site itself answers 503 to a request that reached its slot
    fetched = leased(f"https://{SITE}/fetched", node)
    assert gate.process_request(fetched) is None
    start_transfer(gate, slot, fetched)
    gate.process_response(fetched, HtmlResponse(fetched.url, status=503))
    # then only the site's own 503 is told to the politeness budget
    assert seen.answers == [503]
