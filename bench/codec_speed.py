"""The request codec on the hot path: bytes per queue entry, microseconds to encode and decode.

    python bench/codec_speed.py [--requests 10000] [--urls 100000] [--rounds 7] [--baseline REV]

Every crawled link is encoded once (when it is queued) and decoded once (when it is leased).
Prints the envelope size of requests of each kind, then encode and decode microseconds per
request over REQUESTS requests typical of a crawl (a 60-character URL and a callback, most with
``{"depth": N}`` in meta, some with a Referer header too, as Scrapy's DepthMiddleware and
RefererMiddleware leave them), and the rate of ``url_encoder``, the seed's encoder, over URLS
short URLs. Times are this process's CPU time, the best of ROUNDS (the machine may be shared:
time spent waiting for a core is not the codec's). ``--baseline REV`` also loads the codec as
it was at git revision REV, beside this one in the same process, and runs the two in turns in
every round, so that the machine's noise hits both alike.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib
import subprocess
import sys
import tempfile
import time
import timeit
import types
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import scrapy
from scrapy import Request
from scrapy.http import FormRequest, Response

from scrapy_clustersync import codec as this_codec

REPO = Path(__file__).resolve().parents[1]
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


def baseline_codec(rev: str, into: Path) -> types.ModuleType:
    """The codec module of the package as it was at ``rev``, as the package ``baseline``
    (its own modules, not this checkout's; nothing else of the package is run)."""
    archive = subprocess.run(["git", "archive", rev, "scrapy_clustersync"], cwd=REPO,
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    package = types.ModuleType("baseline")
    package.__path__ = [str(into / "scrapy_clustersync")]
    sys.modules["baseline"] = package
    return importlib.import_module("baseline.codec")


def each(function: Callable[[Any], object], items: list[Any]) -> list[object]:
    return [function(item) for item in items]


def cpu_seconds(run: Callable[[], object]) -> float:
    return timeit.timeit(run, number=1, timer=time.process_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", metavar="REV")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        modules = {"this checkout": this_codec}
        if args.baseline:
            modules = {args.baseline: baseline_codec(args.baseline, Path(tmp)), **modules}
        measure(modules, args.requests, args.urls, args.rounds)


def measure(modules: dict[str, types.ModuleType], count: int, url_count: int,
            rounds: int) -> None:
    spider = Spider()
    codecs = {name: module.RequestCodec(spider, max_bytes=1 << 20)
              for name, module in modules.items()}
    print(f"envelope bytes (URL of {len(URL)} characters, callback 'parse'):")
    print(f"  {'request':<24}" + "".join(f"{name:>16}" for name in codecs))
    for kind, request in sized_requests(spider).items():
        print(f"  {kind:<24}" + "".join(f"{len(c.encode(request)):>16}"
                                        for c in codecs.values()))

    requests = typical_requests(spider, count)
    urls = [f"https://example.com/p/{i}" for i in range(url_count)]
    runs: dict[tuple[str, str], Callable[[], object]] = {}
    for name, module in modules.items():
        codec = codecs[name]
        blobs = [codec.encode(r) for r in requests]
        print(f"{name}: {sum(map(len, blobs)) / len(blobs):.1f} bytes per typical request")
        seed_encode = module.RequestCodec(None, max_bytes=10 * 2**20).url_encoder(
            Request("http://seed.invalid/"), "parse")
        runs[name, "encode"] = functools.partial(each, codec.encode, requests)
        runs[name, "decode"] = functools.partial(each, codec.decode, blobs)
        runs[name, "url_encoder"] = functools.partial(each, seed_encode, urls)
    # what a decode cannot go below: Scrapy building the same requests from their arguments
    arguments: list[dict[str, Any]] = [
        {"url": r.url, "callback": r.callback, "meta": r.meta or None,
         "headers": dict(r.headers) or None} for r in requests]
    runs["Scrapy", "Request()"] = functools.partial(each, lambda a: Request(**a), arguments)
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for key, run in runs.items():
            best[key] = min(best.get(key, float("inf")), cpu_seconds(run))
    print(f"CPU microseconds per request, best of {rounds} rounds ({count:,} typical requests, "
          f"{url_count:,} URLs for url_encoder):")
    for name in codecs:
        rate = url_count / best[name, "url_encoder"]
        print(f"  {name}: encode {best[name, 'encode'] / count * 1e6:.2f}, decode "
              f"{best[name, 'decode'] / count * 1e6:.2f}; url_encoder "
              f"{best[name, 'url_encoder'] / url_count * 1e6:.2f} = {rate:,.0f} URLs/s")
    print(f"  Scrapy's own Request() of the same requests: "
          f"{best['Scrapy', 'Request()'] / count * 1e6:.2f}")


if __name__ == "__main__":
    main()
