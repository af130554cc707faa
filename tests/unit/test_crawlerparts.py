"""The crawler's parts that exist only once its crawl starts, read before then."""

from __future__ import annotations

from unittest.mock import patch

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.request import fingerprint as scrapy_fingerprint

from scrapy_clustersync.plugin.crawler_parts import BoundedDict, CrawlerFingerprinter, started_part


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


class CountingFingerprinter(RequestFingerprinter):
    """A project's subclass of Scrapy's default fingerprinter, counting what it computes."""

    computed = 0

    def fingerprint(self, request: Request) -> bytes:
        self.computed += 1
        return super().fingerprint(request)


def _started(fingerprinter: object) -> CrawlerFingerprinter:
    crawler = Crawler(Spider)
    crawler.request_fingerprinter = fingerprinter  # type: ignore[assignment]
    return CrawlerFingerprinter(crawler)


def test_scrapys_fingerprint_of_a_url_seen_again_is_remembered_and_equal() -> None:
    # given the crawl's fingerprinter is Scrapy's default one
    default = RequestFingerprinter()
    fingerprinter = _started(default)
    with patch.object(default, "fingerprint", wraps=default.fingerprint) as computed:
        # when the same link is fingerprinted on many pages
        fingerprints = {fingerprinter.fingerprint(Request("http://a/x?b=1&a=2"))
                        for _ in range(5)}
    # then it is Scrapy's fingerprint, computed once
    assert fingerprints == {scrapy_fingerprint(Request("http://a/x?b=1&a=2"))}
    assert computed.call_count == 1


def test_whatever_scrapys_fingerprint_depends_on_makes_another_memo_entry() -> None:
    # given Scrapy's default fingerprinter, remembered
    fingerprinter = _started(RequestFingerprinter())
    variants = [Request("http://a/x"), Request("http://a/x", method="POST"),
                Request("http://a/x", method="POST", body=b"q=1"),
                Request("http://a/x#f", meta={"verbatim_url": True}), Request("http://a/x#f")]
    # when each is fingerprinted twice, in turn
    first = [fingerprinter.fingerprint(each) for each in variants]
    second = [fingerprinter.fingerprint(each) for each in variants]
    # then each is Scrapy's own fingerprint, both times
    assert first == second == [scrapy_fingerprint(each) for each in variants]


def test_a_fingerprinter_of_the_projects_own_is_asked_every_time() -> None:
    # given a subclass of Scrapy's fingerprinter (it may look at anything)
    own = CountingFingerprinter()
    fingerprinter = _started(own)
    # when one URL is fingerprinted three times
    for _ in range(3):
        fingerprinter.fingerprint(Request("http://a/1"))
    # then it computed all three
    assert own.computed == 3


def test_a_bounded_dict_forgets_its_oldest_keys_past_its_capacity() -> None:
    kept = BoundedDict(10)
    for number in range(11):
        kept.put(number, str(number))
    assert 0 not in kept and kept[10] == "10" and len(kept) == 10
