"""What ``clustersync seed`` writes: URLs checked as Scrapy would crawl them, read from
arguments, a file or stdin, fingerprinted with the project's fingerprinter, in batches.

Every URL is checked before anything is written: one bad URL refuses the whole seed, naming
it. The ops are the pushes a node would write (``store.write_ops.Push``), so a node that later finds
the same link treats it as a duplicate.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter, fingerprint
from w3lib.url import canonicalize_url, safe_url_string

from ..codec import RequestCodec
from ..plugin.cluster_dupefilter import cluster_fingerprint
from ..store.write_ops import PackedPushes, Push, packed_pushes
from .plain_urls import plain_fingerprint, plain_host

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.utils.request import RequestFingerprinterProtocol

#: pushes per script call: large enough to amortise the round trip, small enough that one
#: call holds Redis for only a few milliseconds
SEED_BATCH = 2000
#: below this many URLs the ops are made in this process (starting workers costs more)
PARALLEL_FROM_URLS = 10_000
MAX_WORKERS = 4
#: schemes whose URLs name a host; without one Scrapy cannot fetch them
HOST_SCHEMES = frozenset({"http", "https", "ftp", "s3"})
MAX_REQUEST_BYTES = 10 * 2**20


class BadSeed(ValueError):
    """A seed Scrapy would not crawl; the message names it and says why."""


def crawlable_schemes(settings: BaseSettings) -> frozenset[str]:
    """The URL schemes the project's DOWNLOAD_HANDLERS can fetch (None switches one off)."""
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    return frozenset(str(s).lower() for s, handler in handlers.items() if handler is not None)


def check_url(url: str, schemes: frozenset[str]) -> str:
    """``url``, checked; BadSeed if Scrapy would not crawl it. (The Request made from it
    later makes it safe, with ``safe_url_string``, as Scrapy does.)"""
    if plain_host(url) is not None and url.partition(":")[0] in schemes:
        return url
    safe = url if url.isascii() else safe_url_string(url)
    try:
        parts = urlsplit(safe)
        host = parts.hostname
    except ValueError as exc:  # a malformed port or IPv6 address
        raise BadSeed(f"{url!r} is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if not scheme or "://" not in safe and scheme != "data":
        raise BadSeed(f"{url!r} has no scheme; write it in full, e.g. https://{url}")
    if scheme not in schemes:
        raise BadSeed(f"{url!r} has scheme {scheme!r}, which this project's DOWNLOAD_HANDLERS "
                      f"cannot fetch; accepted: {', '.join(sorted(schemes))}")
    if scheme in HOST_SCHEMES and not host:
        raise BadSeed(f"{url!r} has no host")
    return safe


def read_urls(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line number, URL) of each line that is not blank or a ``#`` comment."""
    for number, line in enumerate(lines, 1):
        url = line.strip()
        if url and not url.startswith("#"):
            yield number, url


@dataclass
class SeedUrls:
    """The URLs of a seed as read, each with its line number, by source ("arguments", a
    file's path or "stdin")."""

    sources: list[tuple[str, list[tuple[int, str]]]]

    def urls(self) -> list[str]:
        return [url for _, numbered in self.sources for _, url in numbered]

    def check(self, schemes: frozenset[str]) -> None:
        """BadSeed naming the first URL Scrapy would not crawl, and where it is."""
        for source, numbered in self.sources:
            for number, url in numbered:
                try:
                    check_url(url, schemes)
                except BadSeed as exc:
                    raise _located(source, number, exc) from None

    def refusal(self, index: int, schemes: frozenset[str]) -> BadSeed:
        """The BadSeed ``check`` raises for the URL at ``index`` of ``urls()``, one Scrapy
        would not crawl."""
        for source, numbered in self.sources:
            if index < len(numbered):
                number, url = numbered[index]
                try:
                    check_url(url, schemes)
                except BadSeed as exc:
                    return _located(source, number, exc)
                raise ValueError(f"{url!r} is a URL Scrapy would crawl")
            index -= len(numbered)
        raise IndexError(index)


def _located(source: str, number: int, exc: BadSeed) -> BadSeed:
    where = f"line {number} of {source}: " if source != "arguments" else ""
    return BadSeed(f"{where}{exc}; nothing was seeded")


@dataclass(frozen=True)
class SeedEncoder:
    """Makes the push of a seed URL as a node would: fingerprint and envelope."""

    fingerprinter: RequestFingerprinterProtocol
    priority: int
    callback: str | None

    def rows_for(self, urls: list[str]) -> list[tuple[bytes, bytes, str]]:
        """(fingerprint, encoded request, site) of each URL: the costly part, made by the
        workers (tuples travel between processes faster than ops). The site is the URL's host
        name, Scrapy's download slot key of a request with no ``download_slot`` meta."""
        encode = _encoder(self.priority, self.callback)
        if is_scrapys_default(self.fingerprinter):
            return [_default_row(url, encode) for url in urls]
        rows: list[tuple[bytes, bytes, str]] = []
        for url in urls:
            request = Request(url, priority=self.priority)
            fingerprint = cluster_fingerprint(self.fingerprinter.fingerprint(request))
            rows.append((fingerprint, encode(request.url), urlsplit(request.url).hostname or ""))
        return rows

    def ops_of(self, rows: list[tuple[bytes, bytes, str]]) -> list[Push]:
        return [Push(fingerprint, self.priority, blob, 0, site) for fingerprint, blob, site in rows]

    def ops_for(self, urls: list[str]) -> list[Push]:
        return self.ops_of(self.rows_for(urls))

    def checked_batch(self, urls: list[str], schemes: frozenset[str]) -> PackedPushes | int:
        """The pushes of ``urls``, each checked as ``check_url`` does and packed for the write
        (``ops_for``'s, packed); or the index of the first URL Scrapy would not crawl. One pass:
        a plain URL's check and fingerprint share its one regular expression match."""
        if not is_scrapys_default(self.fingerprinter):
            for index, url in enumerate(urls):
                try:
                    check_url(url, schemes)
                except BadSeed:
                    return index
            return packed_pushes(self.rows_for(urls), self.priority)
        encode = _encoder(self.priority, self.callback)
        rows: list[tuple[bytes, bytes, str]] = []
        for index, url in enumerate(urls):
            host = plain_host(url)
            if host is not None and url.partition(":")[0] in schemes:
                rows.append((plain_fingerprint(url), encode(url), host))
                continue
            try:
                check_url(url, schemes)
            except BadSeed:
                return index
            rows.append(_default_row(url, encode))
        return packed_pushes(rows, self.priority)


def is_scrapys_default(fingerprinter: object) -> bool:
    """True if ``fingerprinter`` is Scrapy's own RequestFingerprinter, unchanged."""
    return (type(fingerprinter) is RequestFingerprinter
            and getattr(fingerprinter, "_fingerprint", None) is fingerprint)


def _default_row(url: str, encode: Callable[[str], bytes]) -> tuple[bytes, bytes, str]:
    """``SeedEncoder.rows_for``'s row of ``url`` under Scrapy's default fingerprinter."""
    host = plain_host(url)
    if host is not None:  # its own safe and canonical form
        return plain_fingerprint(url), encode(url), host
    url = safe_url_string(url)
    return default_get_fingerprint(url), encode(url), urlsplit(url).hostname or ""


def default_get_fingerprint(url: str) -> bytes:
    """What Scrapy's default fingerprinter gives a plain GET of ``url`` (a URL as a Request
    holds it, after ``safe_url_string``), without building the Request: a seed of 100,000
    URLs spends most of its time there. ``tests/unit/test_seed.py`` checks that both agree."""
    # json.dumps({"method": "GET", "url": ..., "body": "", "headers": {}}, sort_keys=True)
    data = _DEFAULT_FINGERPRINT_JSON % json.dumps(canonicalize_url(url))
    return hashlib.sha1(data.encode()).digest()  # noqa: S324


_DEFAULT_FINGERPRINT_JSON = '{"body": "", "headers": {}, "method": "GET", "url": %s}'


def _encoder(priority: int, callback: str | None) -> Callable[[str], bytes]:
    codec = RequestCodec(None, max_bytes=MAX_REQUEST_BYTES)
    return codec.url_encoder(Request("http://seed.invalid/", priority=priority), callback)


#: what the worker processes prepare with (inherited when they fork): the encoder and the
#: schemes the project can fetch
_WORKER_JOB: tuple[SeedEncoder, frozenset[str]] | None = None


def _worker_batch(urls: list[str]) -> PackedPushes | int:
    assert _WORKER_JOB is not None
    encoder, schemes = _WORKER_JOB
    return encoder.checked_batch(urls, schemes)


def _checked(results: Iterable[PackedPushes | int], seeds: SeedUrls, schemes: frozenset[str]
             ) -> list[PackedPushes]:
    """The batches of ``results``, in order; BadSeed for the first URL a batch refused."""
    prepared: list[PackedPushes] = []
    for number, result in enumerate(results):
        if isinstance(result, int):
            raise seeds.refusal(number * SEED_BATCH + result, schemes)
        prepared.append(result)
    return prepared


@contextmanager
def prepared_batches(encoder: SeedEncoder, seeds: SeedUrls, schemes: frozenset[str]
                     ) -> Iterator[Callable[[], list[PackedPushes]]]:
    """A function that returns the pushes of ``seeds`` in batches of SEED_BATCH, in order, once
    every URL is checked (BadSeed naming the first one Scrapy would not crawl, before anything
    is written); their preparation starts at once, while the caller does what else it must.

    Checking and fingerprinting cost far more than the write, so a large seed is prepared by
    worker processes (one per core, forked so that they share the project's fingerprinter);
    the main process is left only the writes. Leaving the block stops them.
    """
    urls = seeds.urls()
    batches = [urls[i:i + SEED_BATCH] for i in range(0, len(urls), SEED_BATCH)]

    def checked(results: Iterable[PackedPushes | int]) -> list[PackedPushes]:
        return _checked(results, seeds, schemes)

    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if len(urls) < PARALLEL_FROM_URLS or workers < 2 or \
            "fork" not in multiprocessing.get_all_start_methods():
        yield lambda: checked(encoder.checked_batch(batch, schemes) for batch in batches)
        return
    global _WORKER_JOB
    _WORKER_JOB = (encoder, schemes)
    pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        results = pool.imap(_worker_batch, batches)
        yield lambda: checked(results)
    except Exception:
        # a bad URL: the workers finish what they were given and leave (Pool.terminate can
        # wait for ever on a worker that holds the task queue's lock while it waits for more)
        pool.close()
        pool.join()
        raise
    except BaseException:  # Ctrl-C: stop them now
        pool.terminate()
        raise
    else:
        pool.close()
        pool.join()


def open_source(path: str) -> tuple[IO[str], str]:
    """The file of ``-f PATH`` (``-`` is stdin) and how messages name it."""
    import sys

    if path == "-":
        return sys.stdin, "stdin"
    return open(path, encoding="utf-8"), path  # noqa: SIM115 - closed by the caller
