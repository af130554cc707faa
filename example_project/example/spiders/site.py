"""Follows every link of a site and yields one item per page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class SiteSpider(scrapy.Spider):
    """``scrapy crawl site -a start_url=http://127.0.0.1:8000/page/0.html``

    Its parse rule can change while the cluster crawls: ``clustersync config set site
    TITLE_SELECTOR "h1::text"`` makes every node take the title from there from its next page.
    """

    name = "site"
    #: live settings of this spider's own (key -> type): ``self.live_settings`` holds their
    #: values in force (the job's, else this project's settings)
    clustersync_live_settings = {"TITLE_SELECTOR": "str"}

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not start_url:
            raise ValueError("pass the site to crawl: scrapy crawl site -a start_url=URL")
        self.start_url = start_url

    async def start(self) -> AsyncIterator[Any]:
        # START_DONT_FILTER: a start request that dedup never drops, as many spiders have
        dont_filter = self.settings.getbool("START_DONT_FILTER")
        yield scrapy.Request(self.start_url, callback=self.parse, dont_filter=dont_filter)

    def parse(self, response: Response) -> Iterator[Any]:
        selector = getattr(self, "live_settings", {}).get("TITLE_SELECTOR") or "title::text"
        yield {"url": response.url, "title": response.css(selector).get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
