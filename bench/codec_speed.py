"""The request codec on the hot path: bytes per queue entry, microseconds to encode and decode.

    python bench/codec.py [--requests 10000] [--urls 100000]

Every crawled link is encoded once (when it is queued) and decoded once (when it is leased).
Prints the envelope size of typical requests, encode and decode microseconds per request
(best of 5 rounds over REQUESTS requests typical of a crawl: a 60-character URL and a callback,
some with ``{"depth": N}`` in meta and a Referer header, as Scrapy's DepthMiddleware and
RefererMiddleware leave them) and the rate of ``url_encoder``, the seed's encoder, over URLS
short URLs. Only the public ``RequestCodec`` API is used, so ``PYTHONPATH=<older checkout>``
measures an older version the same way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
import timeit
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import scrapy
from scrapy import Request
from scrapy.http import FormRequest, Response

from scrapy_clustersync.codec import RequestCodec

ROUNDS = 5
URL = "https://shop42.example.com/catalogue/category/books/p-7.html"  # 60 characters


class Spider(scrapy.Spider):
    """The spider whose methods the requests call back."""

    name = "bench"

    def parse(self, response: Response, **kwargs: Any) -> None:  # pragma: no cover
        pass

    def on_error(self, failure: Any) -> None:  # pragma: no cover
        pass


def typical_requests(spider: Spider, count: int) -> list[Request]:
    """``count`` requests as a crawl queues them: 4 in 10 a URL and a callback, 3 in 10 with
    meta {"depth": N} too, 3 in 10 with a depth and a Referer header as well."""
    requests = []
    for i in range(count):
        url = f"https://shop{i % 50}.example.com/catalogue/item-{i:07d}/index.html"
        kind = i % 10
        if kind < 4:
            requests.append(Request(url, callback=spider.parse))
        elif kind < 7:
            requests.append(Request(url, callback=spider.parse, meta={"depth": 1 + i % 5}))
        else:
            requests.append(Request(url, callback=spider.parse, meta={"depth": 2},
                                    headers={"Referer": URL}))
    return requests


def sized_requests(spider: Spider) -> dict[str, Request]:
    return {
        "url + callback": Request(URL, callback=spider.parse),
        "+ meta depth": Request(URL, callback=spider.parse, meta={"depth": 1}),
        "+ meta depth, Referer": Request(URL, callback=spider.parse, meta={"depth": 1},
                                         headers={"Referer": URL}),
        "+ meta of ext types": Request(URL, callback=spider.parse, meta={
            "t": (1, 2), "s": {"a"}, "d": dt.date(2024, 1, 1), "p": Decimal("9.99")}),
        "+ cb_kwargs": Request(URL, callback=spider.parse, cb_kwargs={"page": 3}),
        "+ errback": Request(URL, callback=spider.parse, errback=spider.on_error),
        "+ priority 5": Request(URL, callback=spider.parse, priority=5),
        "+ dont_filter": Request(URL, callback=spider.parse, dont_filter=True),
        "+ flags": Request(URL, callback=spider.parse, flags=["seed"]),
        "POST with body": Request(URL, callback=spider.parse, method="POST", body=b"q=1&p=2"),
        "FormRequest": FormRequest(URL, callback=spider.parse, formdata={"q": "books"}),
        "nested request in meta": Request(URL, callback=spider.parse, meta={
            "next": Request(URL + "?p=2", callback=spider.parse)}),
    }


def best_us(run: Callable[[], object], per: int) -> float:
    """The best of ROUNDS runs of ``run``, in microseconds per item of ``per``."""
    return min(timeit.repeat(run, number=1, repeat=ROUNDS)) / per * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--urls", type=int, default=100_000)
    args = parser.parse_args()
    spider = Spider()
    codec = RequestCodec(spider, max_bytes=1 << 20)
    print(f"envelope bytes (URL of {len(URL)} characters, callback 'parse'):")
    for name, request in sized_requests(spider).items():
        print(f"  {name:<24} {len(codec.encode(request)):>5}")

    requests = typical_requests(spider, args.requests)
    blobs = [codec.encode(r) for r in requests]
    encode_us = best_us(lambda: [codec.encode(r) for r in requests], len(requests))
    decode_us = best_us(lambda: [codec.decode(b) for b in blobs], len(blobs))
    mean_bytes = sum(map(len, blobs)) / len(blobs)
    print(f"{len(requests):,} typical requests ({mean_bytes:.1f} bytes each on average): "
          f"encode {encode_us:.2f} us, decode {decode_us:.2f} us per request (best of {ROUNDS})")

    seed_codec = RequestCodec(None, max_bytes=10 * 2**20)
    urls = [f"https://example.com/p/{i}" for i in range(args.urls)]
    began = time.perf_counter()
    encode = seed_codec.url_encoder(Request("http://seed.invalid/"), "parse")
    made = time.perf_counter() - began
    seconds = min(timeit.repeat(lambda: [encode(u) for u in urls], number=1, repeat=ROUNDS))
    print(f"url_encoder: {args.urls:,} URLs in {seconds:.3f} s = {args.urls / seconds:,.0f} "
          f"URLs/s ({made * 1e3:.2f} ms to make the encoder; {len(encode(urls[-1]))} bytes for "
          f"{urls[-1]!r})")


if __name__ == "__main__":
    main()
