"""The spider of every variant: follows every link of the site, one item per page.

The same code as ``example_project``'s ``site`` spider, so vanilla Scrapy, scrapy-redis and
scrapy-clustersync crawl the same way and only the scheduler differs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not start_url:
            raise ValueError("pass the site to crawl: -a start_url=URL")
        self.start_url = start_url

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("title::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
