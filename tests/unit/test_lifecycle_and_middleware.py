"""The lifecycle extension and the spider middleware, on a scheduler with a fake Redis thread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import CloseSpider, DontCloseSpider

from scrapy_clustersync.plugin.node_lifecycle import NodeLifecycle
from scrapy_clustersync.plugin.signals import node_opened
from scrapy_clustersync.plugin.spider_middleware import ClusterSpiderMiddleware

from .node_fakes import fake_engine, make_crawler, make_scheduler


def opened_lifecycle(tmp_path: Path) -> tuple[NodeLifecycle, Any, Any]:
    """A lifecycle extension that learned its node from the node_opened signal."""
    scheduler, thread = make_scheduler(tmp_path)
    lifecycle = NodeLifecycle(scheduler.crawler)
    scheduler.crawler.signals.connect(lifecycle.node_opened, signal=node_opened)
    scheduler.crawler.signals.send_catch_log(node_opened, scheduler=scheduler)
    return lifecycle, scheduler, thread


def test_an_idle_node_stays_open_while_the_job_runs(tmp_path: Path) -> None:
    lifecycle, _, thread = opened_lifecycle(tmp_path)
    with pytest.raises(DontCloseSpider):
        lifecycle.spider_idle()
    assert thread.idle is True


def test_an_idle_node_closes_once_the_job_is_finished(tmp_path: Path) -> None:
    lifecycle, _, thread = opened_lifecycle(tmp_path)
    thread.finished_with = "finished"
    lifecycle.spider_idle()  # no exception: Scrapy closes the spider with its own reason


def test_a_node_whose_job_is_gone_closes_with_the_reason_that_says_so(tmp_path: Path) -> None:
    lifecycle, _, thread = opened_lifecycle(tmp_path)
    thread.finished_with = "clustersync_state_lost"
    with pytest.raises(CloseSpider) as closing:
        lifecycle.spider_idle()
    assert closing.value.reason == "clustersync_state_lost"


def test_the_engine_finds_an_idle_node_idle_only_once_the_job_is_finished(
    tmp_path: Path,
) -> None:
    # given a node with nothing in progress, in a job that other nodes still crawl
    _, scheduler, thread = opened_lifecycle(tmp_path)
    engine = fake_engine(scheduler)
    # when the engine runs its idle test
    idle_while_running = engine.spider_is_idle()
    # then the spider is not idle (no spider_idle signal), but the node reports itself idle
    assert idle_while_running is False
    assert thread.idle is True
    # and once the job is finished, the engine finds the spider idle
    thread.finished_with = "finished"
    assert engine.spider_is_idle() is True


def test_a_busy_node_is_not_idle_even_when_the_job_is_finished(tmp_path: Path) -> None:
    _, scheduler, thread = opened_lifecycle(tmp_path)
    engine = fake_engine(scheduler)
    engine.nothing_in_progress = False
    thread.finished_with = "finished"
    assert engine.spider_is_idle() is False
    assert thread.idle is False


def test_a_finished_job_wakes_the_engine_once_and_leaves_the_close_to_scrapy(
    tmp_path: Path,
) -> None:
    # given a node whose job the cluster finished
    lifecycle, scheduler, thread = opened_lifecycle(tmp_path)
    engine = fake_engine(scheduler)
    engine.spider = scheduler.crawler.spider
    thread.finished_with = "finished"
    # when the node's Redis thread hands over news three times
    for _ in range(3):
        thread.changed()
    # then it woke the engine once (so spider_idle comes as often as in plain Scrapy) and did
    # not close the spider itself: Scrapy does, with its reason or a CloseSpider's
    assert engine.woken == 1
    assert engine.closed_with is None


def test_a_job_finished_again_after_the_node_found_more_work_wakes_the_engine_again(
    tmp_path: Path,
) -> None:
    lifecycle, scheduler, thread = opened_lifecycle(tmp_path)
    engine = fake_engine(scheduler)
    thread.finished_with = "finished"
    thread.changed()
    thread.finished_with = None  # a spider_idle handler scheduled a request
    thread.changed()
    thread.finished_with = "finished"
    thread.changed()
    assert engine.woken == 2


def test_a_busy_node_whose_job_is_gone_is_closed_by_the_extension(tmp_path: Path) -> None:
    # given a node whose engine is busy, and a job that vanished from Redis
    lifecycle, scheduler, thread = opened_lifecycle(tmp_path)
    engine = fake_engine(scheduler)
    engine.spider = scheduler.crawler.spider
    thread.finished_with = "clustersync_state_lost"
    # when the node's Redis thread hands that over
    thread.changed()
    # then it asks the engine to close the spider with that reason at once
    assert engine.closed_with == "clustersync_state_lost"


def test_an_extension_without_a_node_leaves_scrapy_alone(tmp_path: Path) -> None:
    lifecycle = NodeLifecycle(make_crawler())
    lifecycle.spider_idle()
    lifecycle.node_changed()


async def _start(*outputs: Any, error: Exception | None = None) -> AsyncIterator[Any]:
    for output in outputs:
        yield output
    if error is not None:
        raise error


class FakeStartRun:
    """StartRun as the middleware sees it: may start() run here, and what went through."""

    def __init__(self, runs_here: bool) -> None:
        self.runs_here = runs_here
        self.outputs: list[Any] = []
        self.ends = 0

    async def begin(self) -> bool:
        return self.runs_here

    def yielded(self, output: Any) -> None:
        self.outputs.append(output)

    def ended(self) -> None:
        self.ends += 1


def _collect(middleware: ClusterSpiderMiddleware, start: AsyncIterator[Any]) -> list[Any]:
    async def collect() -> list[Any]:
        return [output async for output in middleware.process_start(start)]

    return asyncio.run(collect())


def _middleware_with(run: FakeStartRun) -> ClusterSpiderMiddleware:
    middleware = ClusterSpiderMiddleware()
    middleware.run = run  # type: ignore[assignment]
    return middleware


def test_start_runs_through_the_middleware_on_the_node_that_claimed_it() -> None:
    run = FakeStartRun(runs_here=True)
    outputs = [Request("http://a/1"), {"item": 1}]
    assert _collect(_middleware_with(run), _start(*outputs)) == outputs
    assert run.outputs == outputs and run.ends == 1


def test_start_yields_nothing_on_a_node_where_another_node_ran_it() -> None:
    run = FakeStartRun(runs_here=False)
    assert _collect(_middleware_with(run), _start(Request("http://a/1"))) == []
    assert run.ends == 0


def test_a_start_that_raises_is_over_and_the_error_reaches_scrapy() -> None:
    run = FakeStartRun(runs_here=True)
    with pytest.raises(ValueError):
        _collect(_middleware_with(run), _start(Request("http://a/1"), error=ValueError("x")))
    assert run.ends == 1


def test_without_a_node_start_passes_through_untouched() -> None:
    outputs = [Request("http://a/1")]
    assert _collect(ClusterSpiderMiddleware(), _start(*outputs)) == outputs
