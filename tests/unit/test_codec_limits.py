"""Decoding is capped like encoding: an entry too big to read goes to the dead letters with its
reason, and the node serves the next one (codec.RequestCodec.decode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec, UndecodableEntry
from scrapy_clustersync.store import DeadLetterEntry

from .node_fakes import make_scheduler


def test_an_envelope_over_the_cap_is_refused_unread_with_its_size() -> None:
    # given an entry of a million-entry map (about 50 MB once decoded) in 2 MB
    bomb = RequestCodec(None, max_bytes=1 << 30).encode(
        Request("http://a/1", meta={"ids": {i: 0 for i in range(1 << 20)}}))
    codec = RequestCodec(None, max_bytes=512 * 1024)
    # when it is decoded, then it is refused, saying why
    with pytest.raises(UndecodableEntry, match=r"it is \d+ bytes, over this node's "
                       r"CLUSTERSYNC_MAX_REQUEST_BYTES \(524288\)"):
        codec.decode(bomb)


def test_a_request_within_the_cap_still_round_trips() -> None:
    codec = RequestCodec(None, max_bytes=512 * 1024)
    request = Request("http://a/1", meta={"ids": list(range(10_000)), "t": (1, 2)})
    decoded = codec.decode(codec.encode(request))
    assert decoded.meta["ids"] == list(range(10_000)) and decoded.meta["t"] == (1, 2)


def test_a_leased_entry_too_big_to_decode_is_dead_lettered_and_the_next_one_served(
    tmp_path: Path,
) -> None:
    # given a node that leased an entry over its cap, then a good one
    scheduler, thread = make_scheduler(tmp_path, CLUSTERSYNC_MAX_REQUEST_BYTES=4096)
    big = RequestCodec(None, 1 << 20).encode(Request("http://a/1", meta={"x": "y" * 8000}))
    thread.leased.append(("big", big))
    thread.leased.append(("good", scheduler.codec.encode(Request("http://a/2"))))
    # when the engine asks for a request
    request = scheduler.next_request()
    # then it gets the good one, and the big one went to the dead letters with its reason
    assert request is not None and request.url == "http://a/2"
    [dead] = thread.ops(DeadLetterEntry)
    assert dead.entry_id == "big"
    assert "over this node's CLUSTERSYNC_MAX_REQUEST_BYTES" in dead.reason
