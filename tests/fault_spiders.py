"""Spiders, middlewares and pipelines of the end-to-end fault tests, written into a copy of the
example project as ``example.spiders.faults`` (the ``fault_project`` fixture of conftest.py).

Each one is what real projects do that once cost a page, an item or a finished job: a start()
that raises or feeds slowly, a ban page that closes the spider, a pipeline that blocks, a live
object in meta, links reached through redirects, retries and errbacks.
"""

from __future__ import annotations

FAULT_SPIDERS = '''
    import os

    import scrapy
    from scrapy.exceptions import CloseSpider

    from example.spiders.helpers import mark, sleep
    from example.spiders.site import SiteSpider


    class FollowSpider(SiteSpider):
        """Follows every link; the base of the spiders below."""

        name = "follow"

        @property
        def base(self):
            return self.start_url.rsplit("/", 1)[0]

        def parse(self, response):
            mark("parsed", f"{self.settings.get('USER_AGENT')} {response.url}")
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href)


    class StartErrorSpider(FollowSpider):
        """start() yields page 0, then fails (a bug, an API that went away, ...)."""

        name = "starterror"

        async def start(self):
            yield scrapy.Request(self.start_url)
            raise RuntimeError("the list of start URLs could not be read")


    class BannedSpider(FollowSpider):
        """A node that sees a ban page stops itself (CloseSpider); the other nodes go on."""

        name = "banned"

        def parse(self, response):
            if self.settings.getbool("BANNED") and response.url.endswith("/page/5.html"):
                raise CloseSpider("banned")
            yield from super().parse(response)


    class StartItemsSpider(FollowSpider):
        """start() yields an item (hard-coded data, a feed header, ...) and page 0."""

        name = "startitems"

        async def start(self):
            yield {"from": "start"}
            yield scrapy.Request(self.start_url)


    class SlowStartItemsPipeline:
        """Items of start() take SLOW_S seconds (a slow database write); notes each done item."""

        def __init__(self, crawler):
            self.slow_s = crawler.settings.getfloat("SLOW_S")
            self.agent = crawler.settings.get("USER_AGENT")

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        async def process_item(self, item):
            if item.get("from") == "start":
                mark("start_item_begun", self.agent)
                await sleep(self.slow_s)
                mark("start_items", self.agent)
            return item


    class SlowStartSpider(FollowSpider):
        """start() yields page 0 .. PAGES-1 slowly; callbacks follow nothing."""

        name = "slowstart"

        async def start(self):
            for index in range(self.settings.getint("PAGES")):
                mark("started", f"{self.settings.get('USER_AGENT')} {index}")
                yield scrapy.Request(f"{self.base}/{index}.html")
                await sleep(self.settings.getfloat("START_SLEEP", 0.2))

        def parse(self, response):
            yield {"url": response.url}


    class MiddlewareStartSpider(SlowStartSpider):
        """The spider's own start() yields page 0 only; a spider middleware (a plugin that
        reads URLs from a file, a sitemap, a queue) adds pages 1 .. PAGES-1 in process_start."""

        name = "mwstart"

        async def start(self):
            yield scrapy.Request(f"{self.base}/0.html")


    class ExtraStartUrls:
        async def process_start(self, start):
            async for item_or_request in start:
                yield item_or_request
            spider_base = os.environ["SITE_BASE"]
            pages = int(os.environ["PAGES"])
            for index in range(1, pages):
                mark("started", f"mw {index}")
                yield scrapy.Request(f"{spider_base}/{index}.html")
                await sleep(0.2)


    class QuickStartSpider(SlowStartSpider):
        """start() yields page 0 .. PAGES-1 at once; callbacks follow nothing."""

        name = "quickstart"

        async def start(self):
            for index in range(self.settings.getint("PAGES")):
                yield scrapy.Request(f"{self.base}/{index}.html")


    class PacedStart:
        """A spider middleware close to the engine (negative order) that reads all of
        start() first, then feeds it to the engine at a steady pace (a rate limiter)."""

        async def process_start(self, start):
            collected = [item_or_request async for item_or_request in start]
            for item_or_request in collected:
                mark("fed", item_or_request.url)
                yield item_or_request
                await sleep(0.5)


    class ChaosSpider(FollowSpider):
        """Links reached in six ways: plain, meta copied from the parent (lease token and all),
        through a redirect, through a 503 then a retry then a redirect, through an errback of a
        request the downloader ignores, through an errback of a 404. An async callback."""

        name = "chaos"

        async def parse(self, response):
            import re
            page = int(re.search(r"/page/(\\d+)[.]html", response.url).group(1))
            yield {"page": page}
            if page % 7 == 0:
                await sleep(0.05)
            for i, href in enumerate(response.css("a::attr(href)").getall()):
                url = response.urljoin(href)
                kind = (page + i) % 6
                if kind == 0:
                    yield scrapy.Request(url)
                elif kind == 1:
                    yield scrapy.Request(url, meta=dict(response.meta))
                elif kind == 2:
                    yield scrapy.Request(url + "?redirect=1")
                elif kind == 3:
                    yield scrapy.Request(url + "?flaky=1")
                elif kind == 4:
                    yield scrapy.Request(url + "?ignore=1", errback=self.retry_plain)
                else:
                    yield scrapy.Request(url + "?gone=1", errback=self.retry_plain)

        def retry_plain(self, failure):
            yield scrapy.Request(failure.request.url.split("?")[0], meta=failure.request.meta)


    class ChaosDownloaderMiddleware:
        def process_request(self, request):
            from scrapy.exceptions import IgnoreRequest
            from scrapy.http import HtmlResponse
            url, _, query = request.url.partition("?")
            if query == "redirect=1":
                return HtmlResponse(request.url, status=302, headers={"Location": url})
            if query == "flaky=1":
                if not request.meta.get("retry_times"):
                    return HtmlResponse(request.url, status=503)
                return HtmlResponse(request.url, status=302, headers={"Location": url})
            if query == "ignore=1":
                raise IgnoreRequest("ignored")
            if query == "gone=1":
                return HtmlResponse(request.url, status=404)
            return None


    class PagesPipeline:
        def __init__(self, crawler):
            self.path = crawler.settings.get("PAGES_FILE")

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        def open_spider(self):
            self.file = open(self.path, "a", buffering=1)

        def close_spider(self):
            self.file.close()

        async def process_item(self, item):
            if "page" in item:
                await sleep(0.002)
                self.file.write(f"{item['page']}\\n")
            return item


    class StuckSpider(FollowSpider):
        """On one node, the callback of page 5 blocks the reactor (a synchronous call without a
        timeout: a database lock, a socket that never answers)."""

        name = "stuck"

        def parse(self, response):
            if self.settings.getbool("STUCK") and response.url.endswith("/page/5.html"):
                import time
                mark("stuck", response.url)
                time.sleep(600)
            yield from super().parse(response)


    class ConnectionInMetaMiddleware:
        """A downloader middleware that keeps a live object in meta (a proxy/session handle,
        a browser page), and answers 503 to the first attempt of page 3."""

        def process_request(self, request):
            from scrapy.http import HtmlResponse
            request.meta["session"] = object()
            if request.url.endswith("/page/3.html") and not request.meta.get("retry_times"):
                return HtmlResponse(request.url, status=503)
            return None

    class SurrogateErrorSpider(SiteSpider):
        """Page 3's callback raises with text decoded from a JSON API (a lone surrogate: an
        emoji cut in half), as user code does."""

        name = "surrogate"

        def parse(self, response):
            yield from super().parse(response)
            if response.url.endswith("/page/3.html"):
                raise ValueError("no product named " + chr(0xD83D))
'''
