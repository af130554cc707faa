"""The node's side of dedup: fingerprints from any fingerprinter, the bounded cache, stats, log."""

from __future__ import annotations

import logging
from collections import Counter
from typing import cast

import pytest
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter, RequestFingerprinterProtocol

from scrapy_clustersync.plugin.cluster_dupefilter import (
    ClusterDupeFilter,
    RecentFingerprints,
    cluster_fingerprint,
)

LOGGER = "scrapy.dupefilters"  # Scrapy's own dupefilter logger


class TextFingerprinter:
    """A custom fingerprinter that gives the URL itself, as str."""

    def fingerprint(self, request: Request) -> str:
        return request.url


class NumberFingerprinter:
    """A broken custom fingerprinter: it gives an int."""

    def fingerprint(self, request: Request) -> int:
        return len(request.url)


def dupefilter(cache_size: int = 100, debug: bool = False) -> ClusterDupeFilter:
    return ClusterDupeFilter(RequestFingerprinter(), Counter(), cache_size, debug=debug)


def sent_by_this_node(dupes: ClusterDupeFilter, url: str) -> Request:
    """``url``'s request, as the scheduler leaves it after sending it to Redis."""
    request = Request(url)
    dupes.sent(dupes.fingerprint(request))
    return request


def filtered_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


# ---- cluster_fingerprint: any fingerprinter, the same 20 bytes on every node ---------------------


def test_a_20_byte_fingerprint_from_scrapy_is_recorded_as_it_is() -> None:
    # given the fingerprint Scrapy's own fingerprinter gives
    fingerprint = RequestFingerprinter().fingerprint(Request("http://a/1"))
    # when it is made a cluster fingerprint
    # then it is unchanged, so the CLI's seeds and the nodes' requests dedup together
    assert cluster_fingerprint(fingerprint) == fingerprint


@pytest.mark.parametrize("length", [8, 16, 32, 64])
def test_a_fingerprint_of_another_length_is_hashed_to_20_bytes(length: int) -> None:
    # given fingerprints of a custom fingerprinter, shorter or longer than SHA-1's
    one, other = b"\x01" * length, b"\x02" * length
    # when they are made cluster fingerprints
    # then each is 20 bytes, the same each time, and distinct fingerprints stay distinct
    assert len(cluster_fingerprint(one)) == 20
    assert cluster_fingerprint(one) == cluster_fingerprint(bytes(one))
    assert cluster_fingerprint(one) != cluster_fingerprint(other)


def test_a_str_fingerprint_is_recorded_as_its_utf8_bytes_would_be() -> None:
    # given a custom fingerprinter that gives str
    # when its fingerprint is made a cluster fingerprint
    # then it is 20 bytes, the same as for the same text in bytes
    assert cluster_fingerprint("http://a/é") == cluster_fingerprint("http://a/é".encode())
    assert len(cluster_fingerprint("http://a/é")) == 20


@pytest.mark.parametrize("fingerprint", [1234, None, ["a"]], ids=["int", "None", "list"])
def test_a_fingerprint_that_is_neither_bytes_nor_str_is_a_type_error_naming_the_setting(
    fingerprint: object,
) -> None:
    # given a fingerprinter that gives something else
    # when its fingerprint is made a cluster fingerprint
    # then the error says what it gave and which setting must change
    with pytest.raises(TypeError, match="REQUEST_FINGERPRINTER_CLASS must return bytes") as error:
        cluster_fingerprint(fingerprint)
    assert f"returned {type(fingerprint).__name__}" in str(error.value)


def test_a_custom_fingerprinter_giving_str_dedups_requests_by_its_fingerprint() -> None:
    # given a node whose project fingerprints requests by their URL, as str
    # (not the protocol, which says bytes: the filter must cope with a project's str)
    fingerprinter = cast("RequestFingerprinterProtocol", TextFingerprinter())
    dupes = ClusterDupeFilter(fingerprinter, Counter(), cache_size=100)
    # when it fingerprints two requests for one URL and one for another
    first, again = dupes.fingerprint(Request("http://a/1")), dupes.fingerprint(Request("http://a/1"))
    other = dupes.fingerprint(Request("http://a/2"))
    # then the same URL has the same 20-byte fingerprint, and another URL another one
    assert first == again != other and len(first) == 20


def test_a_custom_fingerprinter_giving_an_int_stops_the_request_with_a_clear_type_error() -> None:
    # given a node whose project fingerprinter is broken
    # (not the protocol, which says bytes: the filter must refuse it clearly at run time)
    fingerprinter = cast("RequestFingerprinterProtocol", NumberFingerprinter())
    dupes = ClusterDupeFilter(fingerprinter, Counter(), cache_size=100)
    # when it fingerprints a request
    # then the error names the setting to fix, not a failure deep in Redis
    with pytest.raises(TypeError, match="returned int; REQUEST_FINGERPRINTER_CLASS must return"):
        dupes.fingerprint(Request("http://a/1"))


# ---- the fingerprints this node sent: a hit is a duplicate, a miss goes to Redis -----------------


def test_a_request_this_node_already_sent_is_a_duplicate() -> None:
    # given a node that sent a request for a URL
    dupes = dupefilter()
    sent_by_this_node(dupes, "http://a/1")
    # when another request for that URL comes
    request = Request("http://a/1")
    # then it is a duplicate, without asking Redis
    assert dupes.seen_here(dupes.fingerprint(request), request) is True


def test_a_request_this_node_never_sent_is_left_to_redis_to_judge() -> None:
    # given a node that sent a request for one URL
    dupes = dupefilter()
    sent_by_this_node(dupes, "http://a/1")
    # when a request for another URL comes
    request = Request("http://a/2")
    # then it is not called a duplicate here, and nothing is counted
    assert dupes.seen_here(dupes.fingerprint(request), request) is False
    assert dupes.counts == Counter()


def test_a_duplicate_found_here_counts_in_scrapys_stat_and_in_the_local_one() -> None:
    # given a node that sent a request
    dupes = dupefilter()
    request = sent_by_this_node(dupes, "http://a/1")
    # when the same request comes twice more
    for _ in range(2):
        dupes.seen_here(dupes.fingerprint(request), request)
    # then Scrapy's usual stat and the cluster's own say so
    assert dupes.counts == Counter({"dupefilter/filtered": 2,
                                    "clustersync/dedup/filtered_local": 2})


def test_duplicates_filtered_in_redis_count_in_scrapys_stat_and_the_clusters() -> None:
    # given a node
    dupes = dupefilter()
    # when Redis answers that 3 of its pushes were duplicates
    dupes.filtered_in_redis(3)
    # then Scrapy's usual stat and the cluster's own count them, and the local one does not
    assert dupes.counts == Counter({"dupefilter/filtered": 3, "clustersync/dedup/filtered": 3})


def test_after_forget_sent_a_url_sent_before_goes_to_redis_again() -> None:
    # given a node that sent a request
    dupes = dupefilter()
    request = sent_by_this_node(dupes, "http://a/1")
    # when Redis came back older, so that it may not hold what the node sent
    dupes.forget_sent()
    # then the same URL is no longer called a duplicate here: Redis decides
    assert dupes.seen_here(dupes.fingerprint(request), request) is False


# ---- the local cache: bounded, the oldest forgotten first ----------------------------------------


def fingerprints(count: int) -> list[bytes]:
    return [i.to_bytes(20, "big") for i in range(count)]


def test_the_cache_never_holds_more_fingerprints_than_its_capacity() -> None:
    # given a cache for 100 fingerprints
    cache = RecentFingerprints(100)
    # when 1,000 are added
    added = fingerprints(1000)
    for fingerprint in added:
        cache.add(fingerprint)
    # then at most 100 are remembered
    assert sum(fingerprint in cache for fingerprint in added) <= 100


def test_a_full_cache_forgets_its_oldest_fingerprints_first() -> None:
    # given a cache for 100 fingerprints, full
    cache = RecentFingerprints(100)
    added = fingerprints(101)
    for fingerprint in added[:100]:
        cache.add(fingerprint)
    # when one more is added
    cache.add(added[100])
    # then the oldest are forgotten (a tenth at once, so that overflowing is rare) and the
    # newest are all remembered
    assert [fingerprint in cache for fingerprint in added] == [False] * 10 + [True] * 91


def test_a_cache_of_size_zero_remembers_nothing() -> None:
    # given CLUSTERSYNC_LOCAL_SEEN_CACHE = 0
    cache = RecentFingerprints(0)
    # when a fingerprint is added
    cache.add(b"\x01" * 20)
    # then every request goes to Redis to be checked
    assert b"\x01" * 20 not in cache


# ---- the log of filtered requests, as Scrapy's RFPDupeFilter writes it ---------------------------


def test_without_dupefilter_debug_only_the_first_duplicate_is_logged_with_a_hint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a node without DUPEFILTER_DEBUG that sent two requests
    dupes = dupefilter(debug=False)
    requests = [sent_by_this_node(dupes, f"http://a/{i}") for i in (1, 2)]
    # when both come again
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for request in requests:
            dupes.seen_here(dupes.fingerprint(request), request)
    # then one line is logged, for the first, saying how to see them all
    assert filtered_logs(caplog) == [
        "Filtered duplicate request: <GET http://a/1> - no more duplicates will be shown "
        "(see DUPEFILTER_DEBUG to show all duplicates)"
    ]


def test_with_dupefilter_debug_every_duplicate_is_logged_with_its_referer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a node with DUPEFILTER_DEBUG that sent two requests, one found on a page
    dupes = dupefilter(debug=True)
    requests = [sent_by_this_node(dupes, "http://a/1"),
                sent_by_this_node(dupes, "http://a/2")]
    requests[1].headers["Referer"] = "http://a/list"
    # when both come again
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for request in requests:
            dupes.seen_here(dupes.fingerprint(request), request)
    # then each is logged as Scrapy's RFPDupeFilter logs it, with its referer
    assert filtered_logs(caplog) == [
        "Filtered duplicate request: <GET http://a/1> (referer: None)",
        "Filtered duplicate request: <GET http://a/2> (referer: http://a/list)",
    ]
