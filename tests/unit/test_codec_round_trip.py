"""Every kind of request comes back from Redis equal in every attribute, in the envelope this
node writes (version 3) and in the one 0.1.0 nodes wrote (version 2), and an envelope of a
version a node does not read is a dead letter that names its version.

``v2_entries.msgpack`` maps each name of ``codec_cases.cases`` to the entry 0.1.0's
``RequestCodec.encode`` wrote for that request (callbacks of ``codec_cases.Spider``, classes of
``codec_cases.ALLOWED`` allowed): the bytes still queued in jobs that 0.1.0 nodes ran.
"""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec, UndecodableEntry
from scrapy_clustersync.codec_envelope import ENVELOPE_VERSION
from scrapy_clustersync.store.consistency import queue_score_of
from scrapy_clustersync.store.write_ops import Push

from .codec_cases import ALLOWED, URL, Spider, cases, shape

SPIDER = Spider()
CASES = cases(SPIDER)
V2_ENTRIES: dict[str, bytes] = msgpack.unpackb(
    (Path(__file__).parent / "v2_entries.msgpack").read_bytes(), raw=False)


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec(SPIDER, max_bytes=1 << 20, extra_classes=ALLOWED)


def assert_same_request(copy: Request, original: Request) -> None:
    """Same class, and equal, with the same types, in every attribute the class lists
    (callback and errback included: the same methods of the spider)."""
    assert type(copy) is type(original)
    for name in original.attributes:
        assert shape(getattr(copy, name)) == shape(getattr(original, name)), name


@pytest.mark.parametrize("name", CASES)
def test_a_request_comes_back_equal_in_every_attribute(codec: RequestCodec, name: str) -> None:
    # given a request of one kind; when it travels through Redis
    original = CASES[name]
    copy = codec.decode(codec.encode(original))
    # then it comes back as it went in
    assert_same_request(copy, original)


@pytest.mark.parametrize("name", CASES)
def test_an_entry_a_0_1_0_node_queued_is_read_exactly(codec: RequestCodec, name: str) -> None:
    # given the entry a 0.1.0 node wrote for a request (envelope version 2)
    blob = V2_ENTRIES[name]
    assert msgpack.unpackb(blob, raw=False, strict_map_key=False)[0] == 2
    # when this node reads it, then it is that request
    assert_same_request(codec.decode(blob), CASES[name])


def test_a_url_with_a_callback_costs_its_length_and_a_dozen_bytes(codec: RequestCodec) -> None:
    blob = codec.encode(Request(URL, callback=SPIDER.parse_item))
    assert len(blob) <= len(URL) + len("parse_item") + 8
    # version 2 stored every attribute: about 120 bytes more
    assert len(V2_ENTRIES["url and callback"]) - len(blob) > 110


def test_only_what_differs_from_a_plain_request_is_stored(codec: RequestCodec) -> None:
    # given a request that states every plain value, and one that differs in its priority
    plain = codec.encode(CASES["plain values given explicitly"])
    # then the first costs what a bare Request(url) costs, the second a few bytes more
    assert plain == codec.encode(Request(URL))
    assert len(codec.encode(Request(URL, priority=5))) == len(plain) + len("priority") + 4


def test_an_older_node_reads_the_version_of_an_entry_before_anything_in_it(
    codec: RequestCodec,
) -> None:
    # given an entry of this version holding every extension type
    blob = codec.encode(CASES["every attribute"])

    def no_extension(code: int, data: bytes) -> None:
        raise AssertionError("an extension type outside the payload")

    # when it is read as a 0.1.0 node reads an entry, then it is [version, payload] and no
    # extension value is built first: that node dead-letters it, naming version 3
    envelope = msgpack.unpackb(blob, raw=False, ext_hook=no_extension)
    assert isinstance(envelope, list) and len(envelope) == 2
    assert envelope[0] == ENVELOPE_VERSION == 3 and isinstance(envelope[1], bytes)


@pytest.mark.parametrize("version", [1, 4, "3", None])
def test_an_entry_of_a_version_not_read_here_is_refused_naming_its_version(
    codec: RequestCodec, version: object,
) -> None:
    # given an entry of another version, holding an extension type no version has
    blob = msgpack.packb([version, {"url": "http://a", "meta": msgpack.ExtType(99, b"")}])
    # when this node reads it, then it names the version it has and those it reads
    with pytest.raises(UndecodableEntry,
                       match=rf"envelope version {version!r}; this node reads versions 2 and 3"):
        codec.decode(blob)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (["http://a", None, {"formdata": {"a": "b"}}], "unknown field 'formdata'"),
        (["http://a", None, {"_class": "os.system"}], "request class 'os.system' is not allowed"),
        (["http://a", "no_such_method"], "Method 'no_such_method' not found"),
        ([b"http://a"], "without a url"),
        (["http://a", 1], r"not \[url, callback, fields\]"),
        ([], r"not \[url, callback, fields\]"),
    ],
)
def test_bad_version_3_fields_are_refused_with_the_reason(
    codec: RequestCodec, fields: list[object], reason: str,
) -> None:
    blob = msgpack.packb([3, msgpack.packb(fields, use_bin_type=True)], use_bin_type=True)
    with pytest.raises(UndecodableEntry, match=reason):
        codec.decode(blob)


def test_a_version_3_envelope_without_its_request_bytes_is_refused(codec: RequestCodec) -> None:
    with pytest.raises(UndecodableEntry, match="without the bytes of its request"):
        codec.decode(msgpack.packb([3, {"url": "http://a"}]))


def test_the_url_encoder_writes_what_encode_writes() -> None:
    # given the seed's encoder for a template with a priority and meta, and the callback "parse"
    codec = RequestCodec(SPIDER, max_bytes=1 << 20)
    template = Request("http://seed.invalid/", priority=3, meta={"source": "seed"})
    encode = codec.url_encoder(template, "parse_item")
    # when it encodes a URL, then the entry is that of the template with that URL and callback
    expected = template.replace(url=URL, callback=SPIDER.parse_item)
    assert encode(URL) == codec.encode(expected)
    assert_same_request(codec.decode(encode(URL)), expected)
    # and without a callback given, the template's own (none) stays
    assert codec.decode(codec.url_encoder(template)(URL)).callback is None


@pytest.mark.parametrize("name", ["priority", "url only"])
def test_the_queue_score_and_url_are_read_from_entries_of_both_versions(
    codec: RequestCodec, name: str,
) -> None:
    # given the same request as 0.1.0 wrote it and as this node writes it
    request = CASES[name]
    for blob in (V2_ENTRIES[name], codec.encode(request)):
        # then a requeue gives it its priority back, and the log names its URL
        assert queue_score_of(blob) == str(-request.priority)
        assert Push(b"f" * 20, request.priority, blob).describe().startswith(
            f"push of {request.url} ")
