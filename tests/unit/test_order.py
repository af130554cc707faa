"""Scrapy's order within a priority: read from the queue settings, carried by each push."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy import Request
from scrapy.settings import Settings

from scrapy_clustersync.node.prefetch import RecentPushes
from scrapy_clustersync.plugin.crawl_order import QueueOrder
from scrapy_clustersync.store import Push, PushFlags

from .node_fakes import make_scheduler


@pytest.mark.parametrize(("settings", "expected"), [
    ({}, QueueOrder(lifo=True, start_lifo=False)),  # Scrapy's defaults: depth-first
    ({"JOBDIR": "crawls/1"}, QueueOrder(lifo=True, start_lifo=False)),
    ({"SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"},
     QueueOrder(lifo=False, start_lifo=False)),
    # with JOBDIR, the disk queues are the ones Scrapy uses
    ({"JOBDIR": "crawls/1", "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"},
     QueueOrder(lifo=True, start_lifo=False)),
    ({"JOBDIR": "crawls/1", "SCHEDULER_DISK_QUEUE": "scrapy.squeues.MarshalFifoDiskQueue"},
     QueueOrder(lifo=False, start_lifo=False)),
    ({"SCHEDULER_START_MEMORY_QUEUE": "scrapy.squeues.LifoMemoryQueue"},
     QueueOrder(lifo=True, start_lifo=True)),
    ({"SCHEDULER_START_MEMORY_QUEUE": None}, QueueOrder(lifo=True, start_lifo=None)),
])
def test_the_order_follows_scrapys_queue_settings(
    settings: dict[str, object], expected: QueueOrder,
) -> None:
    assert QueueOrder.from_settings(Settings(settings)) == expected


def test_a_queue_class_that_names_no_order_is_fifo_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    order = QueueOrder.from_settings(Settings({"SCHEDULER_MEMORY_QUEUE": "collections.deque"}))
    assert order.lifo is False
    assert "SCHEDULER_MEMORY_QUEUE" in caplog.text and "FIFO" in caplog.text


@pytest.mark.parametrize(("order", "is_start", "flags"), [
    (QueueOrder(lifo=True, start_lifo=False), False, PushFlags.LIFO),
    (QueueOrder(lifo=True, start_lifo=False), True, PushFlags.START),
    (QueueOrder(lifo=False, start_lifo=True), True, PushFlags.START | PushFlags.LIFO),
    (QueueOrder(lifo=False, start_lifo=True), False, PushFlags(0)),
    # start requests sharing the others' queue are queued as the others
    (QueueOrder(lifo=True, start_lifo=None), True, PushFlags.LIFO),
])
def test_each_push_carries_its_order(order: QueueOrder, is_start: bool, flags: PushFlags) -> None:
    assert order.flags(is_start) == flags


def test_the_scheduler_marks_start_requests_and_dont_filter_in_the_push(tmp_path: Path) -> None:
    scheduler, thread = make_scheduler(
        tmp_path, SCHEDULER_MEMORY_QUEUE="scrapy.squeues.FifoMemoryQueue")
    scheduler.enqueue_request(Request("http://a/start", meta={"is_start_request": True}))
    scheduler.enqueue_request(Request("http://a/child"))
    scheduler.enqueue_request(Request("http://a/again", dont_filter=True))
    assert [op.flags for op in thread.ops(Push)] == [
        PushFlags.START, 0, PushFlags.DONT_FILTER]


def test_push_flags_outside_the_known_bits_are_refused_where_the_op_is_made() -> None:
    with pytest.raises(ValueError, match="not a combination of PushFlags"):
        Push(b"\x01" * 20, 0, b"", flags=16)


def test_recent_pushes_give_the_highest_priority_after_a_lease() -> None:
    recent = RecentPushes()
    for number, priority in enumerate([0, 5, -1, 3, 0], start=1):
        recent.add(number, priority)
    assert recent.highest_after(0) == 5
    assert recent.highest_after(2) == 3  # pushes 3, 4 and 5
    assert recent.highest_after(4) == 0
    assert recent.highest_after(5) == float("-inf")  # a lease made after every push
