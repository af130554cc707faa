"""The crawler's parts that exist only once its crawl starts, read before then."""

from __future__ import annotations

from scrapy import Request, Spider
from scrapy.crawler import Crawler

from scrapy_clustersync.plugin.crawler_parts import CrawlerFingerprinter, started_part


class UrlFingerprinter:
    """A project's REQUEST_FINGERPRINTER_CLASS."""

    def fingerprint(self, request: Request) -> bytes:
        return request.url.encode()


class ConstantFingerprinter:
    def __init__(self, value: bytes) -> None:
        self.value = value

    def fingerprint(self, request: Request) -> bytes:
        return self.value


def test_a_part_of_a_crawl_that_has_not_started_is_none() -> None:
    crawler = Crawler(Spider)
    assert started_part(crawler, "engine") is None
    assert started_part(crawler, "request_fingerprinter") is None


def test_before_the_crawl_starts_fingerprints_come_from_the_projects_fingerprinter_class() -> None:
    # given a crawler that has not started, of a project with its own fingerprinter class
    crawler = Crawler(Spider, {"REQUEST_FINGERPRINTER_CLASS": f"{__name__}.UrlFingerprinter"})
    # when a request is fingerprinted
    fingerprint = CrawlerFingerprinter(crawler).fingerprint(Request("http://a/1"))
    # then that class gave the fingerprint
    assert fingerprint == b"http://a/1"


def test_the_crawlers_own_fingerprinter_is_used_from_the_moment_it_exists() -> None:
    # given a fingerprinter that was used before the crawl started
    crawler = Crawler(Spider, {"REQUEST_FINGERPRINTER_CLASS": f"{__name__}.UrlFingerprinter"})
    fingerprinter = CrawlerFingerprinter(crawler)
    fingerprinter.fingerprint(Request("http://a/1"))
    # when the crawl starts and the crawler gets its own
    crawler.request_fingerprinter = ConstantFingerprinter(b"own")
    # then the crawler's own gives the fingerprints
    assert fingerprinter.fingerprint(Request("http://a/1")) == b"own"
