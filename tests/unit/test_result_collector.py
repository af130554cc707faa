"""What a node writes as results: each item numbered in its callback's output, kept only if the
pipelines let it through, carried by the ack of its request (result_collector.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any

import msgpack
import pytest
from scrapy import Request
from scrapy.exceptions import DropItem

from scrapy_clustersync.codec import LEASE_META_KEY
from scrapy_clustersync.config import ResultSettings
from scrapy_clustersync.plugin.result_collector import ResultCollector
from scrapy_clustersync.results.record_format import unpack_data
from scrapy_clustersync.store.write_ops import (
    Ack,
    AckResults,
    Failed,
    Op,
    Release,
    UnleasedResults,
)

FP = b"\x01" * 20


def collector(submitted: list[Op], **settings: Any) -> ResultCollector:
    return ResultCollector(ResultSettings(**settings), "spider", "n1", lambda: submitted.append,
                           lambda token: token == "e1", lambda request: FP, Counter())


def leased_request(url: str = "http://a/1") -> Request:
    return Request(url, meta={LEASE_META_KEY: "e1"})


def through_pipelines(results: ResultCollector, output: list[Any], request: Request,
                      drop: Any = None) -> list[Any]:
    """``output`` numbered, then each item through a pipeline chain ending in ``record``."""
    async def chain(item: Any) -> Any:
        if drop is not None and item is drop:
            raise DropItem("dropped")
        results.record(item)
        return item

    process = results.process_with_slot(chain)

    async def run() -> list[Any]:
        done = []
        for each in results.numbered(output, request, None):
            if isinstance(each, Request):
                continue
            with contextlib.suppress(DropItem):
                done.append(await process(each))
        return done

    return asyncio.run(run())


def ids_of(op: Op) -> list[str]:
    assert isinstance(op, (AckResults, Failed, UnleasedResults))
    flat = msgpack.unpackb(op.results, raw=True)
    return [flat[i].decode() for i in range(0, len(flat), 3)]


def test_an_ack_carries_its_items_numbered_in_output_order_requests_not_counted() -> None:
    results = collector([])
    items = [{"n": 0}, {"n": 1}]
    through_pipelines(results, [items[0], Request("http://a/2"), items[1]], leased_request())
    op = results.attach(Ack("e1"), None)
    assert isinstance(op, AckResults) and ids_of(op) == [f"{FP.hex()}:0", f"{FP.hex()}:1"]


def test_a_dropped_item_is_not_a_result_and_keeps_its_position() -> None:
    results = collector([])
    items = [{"n": 0}, {"n": 1}, {"n": 2}]
    through_pipelines(results, items, leased_request(), drop=items[1])
    assert ids_of(results.attach(Ack("e1"), None)) == [f"{FP.hex()}:0", f"{FP.hex()}:2"]


def test_a_release_drops_the_results_and_an_ack_without_items_stays_an_ack() -> None:
    results = collector([])
    through_pipelines(results, [{"n": 0}], leased_request())
    assert results.attach(Release("e1"), None) == Release("e1")
    assert results.attach(Ack("e1"), None) == Ack("e1")


def test_a_failed_ack_carries_its_error_record() -> None:
    results = collector([])
    op = results.attach(Failed("e1", "http://a/1", 404, "HTTP 404", 1, False),
                        leased_request())
    assert ids_of(op) == [f"{FP.hex()}:error"]
    assert isinstance(op, Failed)
    flat = msgpack.unpackb(op.results, raw=True)
    assert unpack_data(flat[2])["error"]["status"] == 404


def test_items_of_no_lease_are_submitted_at_once() -> None:
    submitted: list[Op] = []
    results = collector(submitted)
    item = {"n": 0}
    results.start_item(item, 3)
    through_pipelines(results, [], leased_request())  # nothing numbered from a callback

    async def run() -> None:
        async def chain(each: Any) -> Any:
            results.record(each)
            return each
        await results.process_with_slot(chain)(item)

    asyncio.run(run())
    assert [ids_of(op) for op in submitted] == [["start:3"]]


def test_a_too_large_item_is_refused_in_one_line_naming_the_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    results = collector([], item_max_bytes=1024)
    with caplog.at_level(logging.ERROR):
        through_pipelines(results, [{"small": 1, "body": "x" * 3000}], leased_request())
    assert results.attach(Ack("e1"), None) == Ack("e1")
    [line] = caplog.messages
    assert "'spider'" in line and "http://a/1" in line and "'body'" in line
    assert "'small'" not in line
    assert results.counts["clustersync/results/refused_too_big"] == 1


def test_with_pages_on_a_leased_page_is_kept_compressed_and_cut_at_its_cap() -> None:
    import zlib

    from scrapy.http import HtmlResponse

    results = collector([], pages=True, page_max_bytes=1024)
    request = leased_request()
    response = HtmlResponse("http://a/1", body=b"<html>" + b"x" * 5000, request=request,
                            headers={"Content-Type": "text/html"})
    list(results.numbered([], request, response))
    op = results.attach(Ack("e1"), None)
    assert ids_of(op) == [f"{FP.hex()}:page"]
    assert isinstance(op, AckResults)
    page = unpack_data(msgpack.unpackb(op.results, raw=True)[2])["page"]
    assert zlib.decompress(page["body"]) == (b"<html>" + b"x" * 5000)[:1024]
    assert page["truncated"] is True and page["status"] == 200
    assert page["headers"] == {"Content-Type": ["text/html"]}


def test_output_that_is_no_item_passes_through_unwritten_with_one_warning_per_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a callback whose output holds values Scrapy passes on as items but are none
    results = collector([])
    output = ["text", 3, {"n": 0}, "more text"]
    # when they go through the pipelines
    with caplog.at_level(logging.WARNING, logger="scrapy_clustersync.plugin.result_collector"):
        done = through_pipelines(results, output, leased_request())
    # then each passes through untouched, no error is logged, and only the item is written
    assert done == output
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().count("yielded a") for r in caplog.records] == [1, 1]
    assert results.counts["clustersync/results/not_an_item"] == 3
    op = results.attach(Ack("e1"), None)
    assert isinstance(op, AckResults) and ids_of(op) == [f"{FP.hex()}:2"]
