"""End to end: a project's DUPEFILTER_CLASS on a cluster node, against plain Scrapy."""

from __future__ import annotations

from pathlib import Path

from testkit.redis_server import RedisServer

from conftest import SiteFactory
from support import project_with_spiders, start_node, wait_all

QUERY_BLIND_SPIDER = """
    import scrapy
    from scrapy.dupefilters import RFPDupeFilter
    from w3lib.url import url_query_cleaner


    class QueryBlindDupeFilter(RFPDupeFilter):
        '''Two URLs that differ only in their query string are one page.'''

        def request_seen(self, request):
            return super().request_seen(request.replace(url=url_query_cleaner(request.url)))


    class QueryLinksSpider(scrapy.Spider):
        '''Follows every link with the page it was found on in the query string, so most pages
        are reached under several URLs.'''

        name = "querylinks"
        custom_settings = {"DUPEFILTER_CLASS": f"{__name__}.QueryBlindDupeFilter"}

        def __init__(self, start_url="", **kwargs):
            super().__init__(**kwargs)
            self.start_url = start_url

        async def start(self):
            yield scrapy.Request(self.start_url)

        def parse(self, response):
            found_on = response.url.rsplit("/", 1)[-1].split("?")[0]
            for href in response.css("a::attr(href)").getall():
                yield response.follow(f"{href}?from={found_on}")
"""

PLAIN_SCRAPY_SWITCH = """
if os.environ.get("PLAIN_SCRAPY"):
    ADDONS = {}
"""


def test_a_projects_dupefilter_class_fetches_what_plain_scrapy_fetches(
    redis_server: RedisServer, site: SiteFactory, tmp_path: Path,
) -> None:
    # given a 60-page site whose pages a spider reaches under several query strings, and a
    # project whose DUPEFILTER_CLASS ignores the query string
    web = site(60, links_per_page=6)
    project = project_with_spiders(tmp_path, "querylinks", QUERY_BLIND_SPIDER)
    with (project / "example" / "settings.py").open("a") as settings:
        settings.write(PLAIN_SCRAPY_SWITCH)
    # when plain Scrapy crawls it, then a cluster node does
    plain = start_node("plain", redis_server.url, web.start_url, tmp_path / "plain",
                       project_dir=project, spider="querylinks", env={"PLAIN_SCRAPY": "1"})
    wait_all([plain])
    node = start_node("node", redis_server.url, web.start_url, tmp_path / "node",
                      project_dir=project, spider="querylinks")
    wait_all([node])
    # then the node fetched the pages plain Scrapy fetched, each once, as the filter says
    by_agent = web.hits_by_agent()
    assert by_agent["node"] == by_agent["plain"]
    assert set(by_agent["plain"].values()) == {1}
    assert len(by_agent["plain"]) == 60
    assert node.finish_reason() == "finished"
