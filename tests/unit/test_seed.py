"""The seed's fast fingerprint path gives what Scrapy's default fingerprinter gives."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from scrapy_clustersync.cli import seed_urls
from scrapy_clustersync.cli.plain_urls import plain_host
from scrapy_clustersync.cli.seed_urls import BadSeed, SeedEncoder, check_url, is_scrapys_default
from scrapy_clustersync.codec import RequestCodec
from scrapy_clustersync.plugin.cluster_dupefilter import cluster_fingerprint
from scrapy_clustersync.store.flush_script import packed_ops
from scrapy_clustersync.store.write_ops import Push, packed_pushes

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


def _urls_of_every_kind() -> list[str]:
    """URLs from pieces that the plain path must take (or leave) exactly as Scrapy would."""
    hosts = ["example.com", "Example.com", "a-b.example", "xn--bcher-kva.example", "h",
             "example.com:8080", "example.com:080", "user@example.com", "example.com."]
    paths = ["", "/", "/a/b", "/a//b", "/./a", "/a/../b", "/a/.", "/.a", "/a.b/c..d", "/~x_y-z",
             "/a%2fb", "/a b", "/ä", "/a;p=1", "/a:b", "/a+b", "/a'b"]
    queries = ["", "?", "?a=1", "?a=", "?a", "?b=1&a=2", "?a=2&a=1", "?a=1&a=2", "?a=1&b=",
               "?a=b=c", "?a=1+2", "?a=%20", "?A=1&a=1", "?a.b=1&a_b=2", "?a=1&&b=2"]
    every = [f"https://{host}{path}{query}" for host in hosts for path in paths
             for query in queries]
    # the other schemes and a fragment on a sample: each part is judged on its own
    others = [f"{scheme}://{host}{path}{query}{tail}"
              for scheme in ("http", "HTTP") for host in hosts[:3] for path in paths[:6]
              for query in queries[:6] for tail in ("", "#frag")]
    return every + others


def test_the_plain_path_agrees_with_scrapy_on_urls_of_every_kind() -> None:
    # given URLs of every kind the plain path must recognise or leave to the general one
    urls = _urls_of_every_kind()
    fingerprinter = RequestFingerprinter()
    # when the seed makes its pushes
    ops = SeedEncoder(fingerprinter, 0, None).ops_for(urls)
    # then each holds the fingerprint, the URL and the site a node's Request would give
    codec = RequestCodec(None, max_bytes=2**20)
    for url, op in zip(urls, ops, strict=True):
        request = Request(url)
        assert op.fingerprint == cluster_fingerprint(fingerprinter.fingerprint(request)), url
        assert codec.decode(op.request).url == request.url, url
        assert op.site == (urlsplit(request.url).hostname or ""), url
    # and the plain path took the plain ones (it is there for speed)
    assert sum(plain_host(url) is not None for url in urls) > 100
    assert plain_host("https://a-b.example:8080/a//b/~x_y-z?a.b=1&a_b=2") == "a-b.example"


def _checked(url: str, schemes: frozenset[str]) -> str:
    try:
        return check_url(url, schemes)
    except BadSeed as exc:
        return f"refused: {exc}"


def test_the_plain_path_checks_a_url_as_the_general_check_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # given URLs of every kind, and a project that fetches http and https only
    schemes = frozenset({"http", "https"})
    urls = _urls_of_every_kind()[::5] + ["ftp://example.com/a", "https://", "https:///a"]
    # when each is checked with the plain path and with the general check alone
    with_plain = [_checked(url, schemes) for url in urls]
    monkeypatch.setattr(seed_urls, "plain_host", lambda url: None)
    general = [_checked(url, schemes) for url in urls]
    # then both give the same URL or the same refusal
    assert with_plain == general


def test_a_seeds_packed_pushes_are_the_bytes_of_the_same_push_records_packed() -> None:
    # the seed's workers pack plain pushes without making a Push of each URL: what flush.lua
    # reads must be what the Push records would have given
    rows = [(b"f" * 20, b"request one", "a.example"), (b"g" * 20, b"request two", "b.example:81")]
    pushes = [Push(fingerprint, -3, request, 0, site) for fingerprint, request, site in rows]
    assert packed_pushes(rows, -3).packed == packed_ops(pushes)
    assert packed_pushes(rows, -3).count == 2
    with pytest.raises(ValueError, match="no tab and no newline"):
        packed_pushes([(b"f" * 20, b"r", "bad\tsite")], 0)
