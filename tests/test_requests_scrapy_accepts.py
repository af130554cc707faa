"""Every request plain Scrapy crawls is crawled by the cluster: what can travel through Redis
travels with its types intact, what cannot is crawled on the node that made it."""

from __future__ import annotations

import re
from pathlib import Path

from scrapy_clustersync.store import JobStore, make_client
from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import marks, missing_pages, node_env, project_with_spiders, start_node, wait_all

ANY_REQUEST_SPIDER = '''
    import datetime as dt
    import functools
    from decimal import Decimal

    import scrapy
    from example.spiders.helpers import mark
    from example.spiders.site import SiteSpider

    TYPED = {"ids": (1, (2, 3)), "tags": {"a", "b"}, "day": dt.date(2024, 1, 2),
             "when": dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.timezone.utc),
             "price": Decimal("19.99"), "big": 2**80, "negative": -2**70, "raw": b"\\x00\\xff"}


    class SessionRequest(scrapy.Request):
        """Not in CLUSTERSYNC_REQUEST_CLASSES."""


    class AnyRequestSpider(SiteSpider):
        name = "anyrequest"

        def parse(self, response):
            yield {"url": response.url}
            for n, href in enumerate(response.css("a::attr(href)").getall()):
                yield self.request(response.urljoin(href), n % 6)

        def request(self, url, kind):
            if kind == 0:  # travels, with values msgpack has no type for
                meta = dict(TYPED, item=scrapy.Item(),
                            nested=scrapy.Request(url + "?nested", callback=self.parse))
                return scrapy.Request(url, callback=self.parse_typed, meta=meta,
                                      cb_kwargs={"ids": (4, 5)})
            if kind == 1:
                return scrapy.Request(url, callback=lambda response: self.parse(response))
            if kind == 2:
                return scrapy.Request(url, callback=functools.partial(self.parse_noted, note=2))
            if kind == 3:
                return SessionRequest(url, callback=self.parse)
            if kind == 4:  # over CLUSTERSYNC_MAX_REQUEST_BYTES
                return scrapy.Request(url, callback=self.parse, meta={"blob": "x" * 8192})
            return scrapy.Request(url, callback=self.parse)

        def parse_typed(self, response, ids):
            meta = response.meta
            same = all(meta[k] == v and type(meta[k]) is type(v) for k, v in TYPED.items())
            nested = meta["nested"]
            same = same and ids == (4, 5) and type(meta["item"]) is scrapy.Item
            same = same and nested.callback == self.parse and nested.url.endswith("?nested")
            mark("typed", f"{same} {response.url}")
            yield from self.parse(response)

        def parse_noted(self, response, note):
            yield from self.parse(response)
'''

KINDS_KEPT = ("must be methods of the spider", "SessionRequest' is not allowed",
              "CLUSTERSYNC_MAX_REQUEST_BYTES")


def stat(log: str, name: str) -> int:
    found = re.search(rf"'{re.escape(name)}': (\d+)", log)
    return int(found.group(1)) if found else 0


def test_every_request_scrapy_would_crawl_is_crawled_and_typed_values_arrive_intact(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path
) -> None:
    # given a spider that yields requests with tuples, sets, dates, Decimals, big ints, bytes,
    # an Item and a nested Request in meta, and requests that cannot travel: lambda and
    # functools.partial callbacks, a Request subclass not allowed, one over the size cap
    project = project_with_spiders(tmp_path, "anyrequest", ANY_REQUEST_SPIDER)
    web = site(80)
    settings = {"CLUSTERSYNC_MAX_REQUEST_BYTES": "4096"}
    # when two nodes crawl it
    nodes = [start_node(name, redis_server.url, web.start_url, tmp_path, settings,
                        project_dir=project, spider="anyrequest", env=node_env(tmp_path))
             for name in ("node1", "node2")]
    wait_all(nodes)
    # then every page was fetched, as plain Scrapy would, and the job finished
    assert missing_pages(web) == []
    assert [node.finish_reason() for node in nodes] == ["finished", "finished"]
    # and the values that travelled came back with their types, on whichever node
    typed = marks(tmp_path, "typed")
    assert typed and all(line.startswith("True ") for line in typed)
    # and what could not travel was counted, warned about once per kind and node, and the
    # cluster's status shows the count
    logs = [node.log() for node in nodes]
    kept = sum(stat(log, "scheduler/unserializable") for log in logs)
    assert kept > 0
    for log in logs:
        warnings = [line for line in log.splitlines() if "is not crash-safe" in line]
        for kind in KINDS_KEPT:
            assert sum(kind in line for line in warnings) <= 1
    assert any(kind in log for log in logs for kind in KINDS_KEPT)
    status = JobStore(make_client(redis_server.url), "anyrequest", "cli").status()
    assert status.unserializable == kept
