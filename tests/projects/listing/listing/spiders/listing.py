"""A listing page: many items (one per entry of the list), then every link to other pages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response


class ListingSpider(scrapy.Spider):
    """``scrapy crawl listing -a start_url=http://127.0.0.1:8000/page/0.html``"""

    name = "listing"

    def __init__(self, start_url: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not start_url:
            raise ValueError("pass the site to crawl: scrapy crawl listing -a start_url=URL")
        self.start_url = start_url

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(self.start_url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        # the entries of the listing first, as a scraper of a real listing yields them...
        title = response.css("title::text").get()
        for position in range(self.settings.getint("ITEMS_PER_PAGE")):
            yield {"page": response.url, "position": position, "title": title}
        # ...then the pagination and the other links of the page
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
