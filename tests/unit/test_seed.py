"""The seed's fast fingerprint path gives what Scrapy's default fingerprinter gives."""

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.cli.seed_urls import SeedEncoder, is_scrapys_default
from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.plugin.cluster_dupefilter import cluster_fingerprint

ODD_URLS = [
    "https://shop.example.com/item/1?ref=seed",
    "https://shop.example.com/item/1?b=2&a=1",
    "https://shop.example.com/a b/c d?q=x y",
    "https://shop.example.com/page#fragment",
    "https://SHOP.Example.COM:443/%7Euser/?",
    "https://bücher.example/straße?ä=ö",
    "http://example.com/%E2%82%AC?x=%2f&y=%2F",
    "https://example.com/path;params?q=1&q=2&q=1",
    "https://user:pw@example.com:8080/x/../y/./z",
    "https://example.com/?q=a+b&r=a%20b",
    "data:text/plain,hello",
]


class CustomFingerprinter(RequestFingerprinter):
    def fingerprint(self, request: Request) -> bytes:
        return request.url.encode()


def test_the_fast_path_gives_scrapys_fingerprint_and_url_for_odd_urls() -> None:
    # given Scrapy's default fingerprinter
    fingerprinter = RequestFingerprinter()
    assert is_scrapys_default(fingerprinter)
    # when the seed makes its pushes
    ops = SeedEncoder(fingerprinter, 0, None).ops_for(ODD_URLS)
    # then each holds the fingerprint and the URL a node's Request would hold
    codec = RequestCodec(None, max_bytes=2**20)
    for url, op in zip(ODD_URLS, ops, strict=True):
        request = Request(url)
        assert op.fingerprint == cluster_fingerprint(fingerprinter.fingerprint(request)), url
        assert codec.decode(op.request).url == request.url


@pytest.mark.parametrize("fingerprinter", [CustomFingerprinter(),
                                            RequestFingerprinter()])
def test_another_fingerprinter_is_asked_for_every_url(fingerprinter: RequestFingerprinter
                                                      ) -> None:
    if type(fingerprinter) is RequestFingerprinter:
        # a default fingerprinter whose function was swapped is no longer the default
        setattr(fingerprinter, "_fingerprint", lambda request: b"x" * 20)  # noqa: B010
    assert not is_scrapys_default(fingerprinter)
    ops = SeedEncoder(fingerprinter, 3, None).ops_for(ODD_URLS[:3])
    assert [op.fingerprint for op in ops] == [
        cluster_fingerprint(fingerprinter.fingerprint(Request(url))) for url in ODD_URLS[:3]]
    assert {op.priority for op in ops} == {3}
