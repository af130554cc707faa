"""ResultCollector: the results of a node's pages, held until the ack they travel with.

Where each result comes from, and when it is complete, follows the lease accounting of
lease_tracker.py: Scrapy hands a callback's (or errback's) whole output, after every spider
middleware, to ``Scraper.handle_spider_output_async``, and the ack of its request is buffered
only once every item of it has left the item pipelines. So:

- the output is numbered there: the n-th item of a request's output gets the result id
  ``<fingerprint hex>:<n>``; an item ``start()`` yielded gets ``start:<n>`` (ClusterSpider-
  Middleware numbers them: ``start_item``);
- each item runs the item pipelines under a slot, and its record is kept only if the
  pipelines let it through (an item ending in DropItem or an error is not a result). Where
  ``ResultPipeline`` is the last pipeline (as the add-on orders it, unless the project has one
  after it), it is taken out of the chain and the item the chain returns is encoded into the
  slot: what it would have seen, at no step, coroutine or context variable of its own per
  item. Otherwise the slot is a context variable (seen by everything the pipelines await),
  which ``ResultPipeline`` fills with the encoded item;
- the records of a leased request wait here until its ack (``attach``), which carries them to
  Redis in one op; a release (the request is crawled again) drops them. Results of no lease
  (start() items, requests kept on this node) go at once, in an op deduplicated by id.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from itemadapter import ItemAdapter
from scrapy import Item, Request
from scrapy.http import Response

from ..codec import LEASE_META_KEY
from ..config import ResultSettings
from ..results.record_format import CannotTravel, DataEncoder, pack_data
from ..store.write_ops import Ack, AckResults, Failed, Op, UnleasedResults, results_blob

logger = logging.getLogger(__name__)

#: one record of the stream: result id, kind, ``d``
Record = tuple[str, str, bytes]


@dataclass(slots=True)
class Slot:
    """One item on its way through the item pipelines: where it comes from, and its record
    once ``ResultPipeline`` encoded it."""

    token: str | None  # the lease it travels with; None: written without one
    result_id: str
    url: str | None
    record: Record | None = None


#: the slot of the item the item pipelines are processing in this context (None: none)
SLOT: ContextVar[Slot | None] = ContextVar("clustersync_result_slot", default=None)


class ResultCollector:
    """The results of this node's pages until their acks (see the module doc).

    ``submit`` buffers an op in the node's ordered write stream (None: the node has left);
    ``leased`` says whether a lease token is being scraped here; ``fingerprint`` is Scrapy's
    request fingerprinter's; ``counts`` gathers the ``clustersync/results/*`` stats.
    """

    def __init__(self, settings: ResultSettings, spider: str, node: str,
                 submit: Callable[[], Callable[[Op], None] | None],
                 leased: Callable[[str], bool], fingerprint: Callable[[Request], bytes],
                 counts: Counter[str]) -> None:
        self.settings = settings
        self.spider, self.node = spider, node
        self._submit = submit
        self._leased = leased
        self._fingerprint = fingerprint
        self.counts = counts
        self._origins: dict[int, Slot] = {}  # id(item) -> its slot, until it is processed
        #: id(item) -> the slots of its later yields, for an item object yielded again before
        #: its first yield was processed
        self._again: dict[int, list[Slot]] = {}
        self._pending: dict[str, list[Record]] = {}  # lease token -> its records
        self._warned_types: set[str] = set()  # the types of output warned of as no item
        self._encode = DataEncoder().data

    def watch(self, scraper: Any) -> bool:
        """Number the output Scrapy's ``scraper`` hands on and run its item pipelines under
        slots; False (and results stay off) if it lacks a hook: a test's fake, or an
        ``ITEM_PROCESSOR`` of the project's with no ``process_item_async``."""
        # looked up on the classes: a Mock's attributes are made up on the instance
        itemproc: Any = getattr(scraper, "itemproc", None)
        if not (callable(getattr(type(scraper), "handle_spider_output_async", None))
                and callable(getattr(type(itemproc), "process_item_async", None))):
            return False
        handle_output = scraper.handle_spider_output_async
        process = itemproc.process_item_async
        numbered = self.numbered
        last = _take_out_if_last(itemproc)

        # a plain function handing on Scrapy's coroutine: none of its own per page
        def watched_output(result: Any, request: Request, *args: Any, **kwargs: Any) -> Any:
            response = args[0] if args else kwargs.get("response")
            return handle_output(numbered(result, request, response), request, *args, **kwargs)

        scraper.handle_spider_output_async = watched_output
        itemproc.process_item_async = self.process_with_slot(process, records_output=last)
        return True

    # ---- where an item comes from ----------------------------------------------------------
    def start_item(self, item: Any, position: int) -> None:
        """``item`` is the ``position``-th item start() yielded (0-based)."""
        self._note(item, Slot(None, f"start:{position}", None))

    def _note(self, item: Any, slot: Slot) -> None:
        key = id(item)
        if key in self._origins:
            self._again.setdefault(key, []).append(slot)
        else:
            self._origins[key] = slot

    def numbered(self, output: Any, request: Request, response: Any) -> Any:
        """``output`` of ``request``'s callback or errback, each item numbered as it passes;
        with pages kept, the page goes to the request's records first."""
        if output is None:
            return output
        token = request.meta.get(LEASE_META_KEY)
        token = token if isinstance(token, str) and self._leased(token) else None
        fp = self._fingerprint(request).hex()
        if token is not None and self.settings.pages and isinstance(response, Response):
            self._keep(token, self._page_record(fp, response))
        origins, noted = self._origins, self._note
        url = request.url

        def note(position: int, each: Any) -> None:
            key = id(each)
            if key in origins:
                noted(each, Slot(token, f"{fp}:{position}", url))
            else:
                origins[key] = Slot(token, f"{fp}:{position}", url)

        if hasattr(output, "__aiter__"):
            return _numbered_async(output, note)
        return _numbered_sync(output, note)

    # ---- through the item pipelines --------------------------------------------------------
    def process_with_slot(self, process: Callable[[Any], Any],
                          records_output: bool = False) -> Callable[[Any], Any]:
        """``process`` (the item pipelines' ``process_item_async``) running each item under
        its slot, its record kept only if the pipelines let the item through: the record
        ``ResultPipeline`` made in the chain, or with ``records_output`` (ResultPipeline taken
        out of the chain, which it ended) the record of the item the chain returns."""
        slot_of, kept = self._slot_of, self._kept

        async def processed(item: Any) -> Any:
            slot = slot_of(item)
            if slot is None:
                return await process(item)
            reset = SLOT.set(slot)
            try:
                output = await process(item)
            finally:
                SLOT.reset(reset)
            if slot.record is not None:
                kept(slot)
            return output

        async def processed_then_recorded(item: Any) -> Any:
            slot = slot_of(item)
            if slot is None:
                return await process(item)
            output = await process(item)
            slot.record = self._record_of(output, slot)
            if slot.record is not None:
                kept(slot)
            return output

        return processed_then_recorded if records_output else processed

    def _slot_of(self, item: Any) -> Slot | None:
        """The slot ``item`` was yielded in (the next one, for an item yielded again)."""
        key = id(item)
        slot = self._origins.pop(key, None)
        again = self._again
        if slot is not None and again:
            later = again.get(key)
            if later:
                self._origins[key] = later.pop(0)
                if not later:
                    del again[key]
        return slot

    def record(self, item: Any) -> None:
        """Encode ``item`` (what the pipelines before ``ResultPipeline`` made of it) into the
        slot it is processed under (see ``_record_of``)."""
        slot = SLOT.get()
        if slot is not None:
            slot.record = self._record_of(item, slot)

    def _record_of(self, item: Any, slot: Slot) -> Record | None:
        """The record of ``item`` in ``slot``; None, with one error line and a stat, if it is
        too large or holds a value that cannot be encoded (the crawl goes on), or if it is no
        item."""
        if type(item) is not dict and not isinstance(item, Item) and not ItemAdapter.is_item(item):
            self._not_an_item(item, slot.url)
            return None
        fields: dict[str, Any] = item if type(item) is dict else dict(item) if isinstance(
            item, Item) else ItemAdapter(item).asdict()
        encode = self._encode
        try:
            try:  # a dict or an Item of plain values (nearly all): as it is, no copy
                d = encode("item", slot.url, self.spider, self.node, _now_ms(), fields)
            except CannotTravel:  # an Item or a dataclass in it: ItemAdapter makes dicts of them
                fields = ItemAdapter(item).asdict()
                d = encode("item", slot.url, self.spider, self.node, _now_ms(), fields)
        except (CannotTravel, TypeError, ValueError, OverflowError) as exc:
            self.counts["clustersync/results/refused_unencodable"] += 1
            logger.error("clustersync: an item of spider %r from %s is not written to the "
                         "results: %s (%s)", self.spider, slot.url or "start()",
                         _bad_fields(fields), exc)
            return None
        if len(d) > self.settings.item_max_bytes:
            self.counts["clustersync/results/refused_too_big"] += 1
            logger.error("clustersync: an item of spider %r from %s is not written to the "
                         "results: it encodes to %d bytes, over CLUSTERSYNC_RESULT_MAX_BYTES "
                         "(%d); largest fields: %s", self.spider, slot.url or "start()", len(d),
                         self.settings.item_max_bytes,
                         _largest_fields(fields, len(d) - self.settings.item_max_bytes))
            return None
        return (slot.result_id, "item", d)

    def _not_an_item(self, value: Any, url: str | None) -> None:
        """Scrapy hands any output that is not a request to the pipelines as an item and lets
        it fail only where a pipeline uses it as one: it passes through here untouched, is not
        written to the results, and is counted, with one warning per type."""
        self.counts["clustersync/results/not_an_item"] += 1
        kind = type(value).__qualname__
        if kind not in self._warned_types:
            self._warned_types.add(kind)
            logger.warning("clustersync: spider %r yielded a %s (from %s), which is no item "
                           "(itemadapter does not know it): it is not written to the results",
                           self.spider, kind, url or "start()")

    def _kept(self, slot: Slot) -> None:
        assert slot.record is not None
        if slot.token is not None:
            self._keep(slot.token, slot.record)
            return
        submit = self._submit()
        if submit is not None:
            submit(UnleasedResults(results_blob([slot.record])))

    def _keep(self, token: str, record: Record) -> None:
        self._pending.setdefault(token, []).append(record)

    # ---- with the ack ------------------------------------------------------------------------
    def attach(self, op: Op, request: Request | None) -> Op:
        """``op``, the op that settles a lease, with the lease's results: an ack becomes an
        ack carrying them, a failed ack carries them and its error record; any other op (a
        release: the request is crawled again) drops them."""
        token = op.settles
        records = self._pending.pop(token, None) if token is not None else None
        if isinstance(op, Failed) and request is not None:
            records = (records or []) + [self._error_record(op, request)]
            return replace(op, results=results_blob(records))
        if records and type(op) is Ack:
            return AckResults(op.entry_id, results_blob(records))
        return op

    def _error_record(self, op: Failed, request: Request) -> Record:
        data = {"status": op.status, "error": op.error, "attempts": op.attempts,
                "errback": op.errback}
        fp = self._fingerprint(request).hex()
        return (f"{fp}:error", "error",
                self._encode("error", op.url, self.spider, self.node, _now_ms(), data))

    def _page_record(self, fp: str, response: Response) -> Record:
        body = response.body
        cap = self.settings.page_max_bytes
        data: dict[str, Any] = {
            "status": response.status,
            "headers": {_text(name): [_text(v) for v in values]
                        for name, values in response.headers.items()},
            "body": zlib.compress(body[:cap]), "encoding": "zlib"}
        if len(body) > cap:
            data["truncated"] = True
        return (f"{fp}:page", "page",
                self._encode("page", response.url, self.spider, self.node, _now_ms(), data))

    def pending(self) -> int:
        """How many leases have results waiting for their ack."""
        return len(self._pending)


def _numbered_sync(output: Any, note: Callable[[int, Any], None]) -> Any:
    """``output``, ``note`` called with each item and its position among the items."""
    position = 0
    for each in output:
        if each is not None and not isinstance(each, Request):
            note(position, each)
            position += 1
        yield each


async def _numbered_async(output: Any, note: Callable[[int, Any], None]) -> Any:
    """``_numbered_sync`` of an async iterable (an async callback's, or an errback's)."""
    position = 0
    async for each in output:
        if each is not None and not isinstance(each, Request):
            note(position, each)
            position += 1
        yield each


def _take_out_if_last(itemproc: Any) -> bool:
    """Take ``ResultPipeline.process_item`` out of the item processor's chain if it is the last
    step there (nothing after it can change or drop the item); True if it did."""
    # here, not at the top: result_pipeline.py names the scheduler that imports this module
    from .result_pipeline import ResultPipeline

    methods = getattr(itemproc, "methods", None)  # Scrapy's MiddlewareManager: name -> deque
    chain = methods.get("process_item") if isinstance(methods, dict) else None
    if not chain:
        return False
    last = chain[-1]
    if not (isinstance(getattr(last, "__self__", None), ResultPipeline)
            and getattr(last, "__func__", None) is ResultPipeline.process_item):
        return False
    chain.pop()
    return True


def _now_ms() -> int:
    return int(time.time() * 1000)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _largest_fields(fields: dict[str, Any], excess: int) -> str:
    """The largest fields of an item that together make up ``excess`` bytes, with sizes."""
    sizes = sorted(((_size(value), str(name)) for name, value in fields.items()), reverse=True)
    named, total = [], 0
    for size, name in sizes:
        named.append(f"{name!r} ({size} bytes)")
        total += size
        if total >= excess:
            break
    return ", ".join(named) or "none"


def _bad_fields(fields: dict[str, Any]) -> str:
    """The fields of an item whose value cannot be encoded."""
    bad = [str(name) for name, value in fields.items() if _size(value) < 0]
    return "fields " + ", ".join(repr(name) for name in bad) if bad else "an unknown field"


def _size(value: Any) -> int:
    """The encoded bytes of ``value``, or -1 if it cannot be encoded."""
    try:
        return len(pack_data(value))
    except (CannotTravel, TypeError, ValueError, OverflowError):
        return -1


def open_results(crawler: Any, settings: ResultSettings, node: str,
                 submit: Callable[[], Callable[[Op], None] | None], tracker: Any,
                 scraper: Any) -> ResultCollector | None:
    """The node's ResultCollector, watching Scrapy's ``scraper`` and giving ``tracker``'s
    acks their results; None with results off (``CLUSTERSYNC_RESULTS = False``) or no
    scraper to watch."""
    if not settings.enabled:
        return None
    spider = getattr(crawler.spidercls, "name", None) or "spider"

    def fingerprint(request: Request) -> bytes:
        # looked up when an item needs it: a crawler opened by hand (Scrapy's scheduler tests)
        # has none, and a newer Scrapy raises when it is read before the crawl starts
        return bytes(crawler.request_fingerprinter.fingerprint(request))

    collector = ResultCollector(settings, spider, node, submit, tracker.scraping.__contains__,
                                fingerprint, tracker.counts)
    if not collector.watch(scraper):
        if callable(getattr(type(scraper), "handle_spider_output_async", None)):
            logger.warning("clustersync: the item processor %s (ITEM_PROCESSOR) has no "
                           "process_item_async: no item is written to the results stream",
                           type(getattr(scraper, "itemproc", None)).__qualname__)
        else:
            logger.debug("clustersync: no Scrapy scraper to watch; no results are written")
        return None
    tracker.attach = collector.attach
    return collector
