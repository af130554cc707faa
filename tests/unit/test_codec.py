"""Requests to bytes and back: no pickle, names for callbacks, clear refusals."""

from __future__ import annotations

import msgpack
import pytest
from scrapy import Request
from scrapy.http import FormRequest, Response

from scrapy_clustersync.codec import (
    LEASE_META_KEY,
    RequestCodec,
    UndecodableEntry,
    UnencodableRequest,
)

from .codec_cases import Spider


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec(Spider(), max_bytes=4096)


def test_a_request_survives_the_round_trip_with_callbacks_by_name(codec: RequestCodec) -> None:
    spider = codec.spider
    assert isinstance(spider, Spider)
    original = Request("http://a/1?q=1", callback=spider.parse_item, errback=spider.on_error,
                       method="POST", body=b"x=1", headers={"X-A": "b"}, cookies={"c": "d"},
                       meta={"depth": 2, "tags": ["a"], "blob": b"\x00"}, priority=7,
                       dont_filter=True, cb_kwargs={"page": 3}, flags=["f"])
    copy = codec.decode(codec.encode(original))
    assert copy.to_dict(spider=spider) == original.to_dict(spider=spider)
    assert copy.callback == spider.parse_item


def test_form_requests_keep_their_class(codec: RequestCodec) -> None:
    copy = codec.decode(codec.encode(FormRequest("http://a", formdata={"k": "v"})))
    assert type(copy) is FormRequest and copy.body == b"k=v"


def test_the_lease_token_never_travels(codec: RequestCodec) -> None:
    blob = codec.encode(Request("http://a", meta={LEASE_META_KEY: "00ff", "keep": 1}))
    assert codec.decode(blob).meta == {"keep": 1}


def test_unencodable_meta_is_refused_naming_the_request_and_the_key(codec: RequestCodec) -> None:
    with pytest.raises(UnencodableRequest) as error:
        codec.encode(Request("http://a/p", meta={"ok": 1, "db_conn": object()}))
    message = str(error.value)
    assert "http://a/p" in message and "meta['db_conn']" in message and "type object" in message


def test_a_callback_that_is_not_a_spider_method_is_refused(codec: RequestCodec) -> None:
    def not_a_method(response: Response) -> None:  # pragma: no cover - never called
        pass

    with pytest.raises(UnencodableRequest, match="Callbacks and errbacks must be methods"):
        codec.encode(Request("http://a", callback=not_a_method))


def test_oversized_requests_are_refused_with_the_limit(codec: RequestCodec) -> None:
    with pytest.raises(UnencodableRequest, match="CLUSTERSYNC_MAX_REQUEST_BYTES"):
        codec.encode(Request("http://a", body=b"x" * 5000))


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (b"\xc1garbage", "not a msgpack envelope"),
        (msgpack.packb({"url": "http://a"}), "not a [version, request] envelope"),
        (msgpack.packb([99, {"url": "http://a"}]), "envelope version 99"),
        (msgpack.packb([2, {"url": "http://a", "callback": "nope"}]), "cannot build the request"),
        (msgpack.packb([2, {"url": "http://a", "_class": "os.system"}]), "is not allowed"),
    ],
)
def test_bad_entries_are_rejected_with_a_reason(
    codec: RequestCodec, blob: bytes, reason: str
) -> None:
    with pytest.raises(UndecodableEntry, match=reason.replace("[", r"\[")):
        codec.decode(blob)


def test_user_request_classes_need_the_allow_list() -> None:
    class MyRequest(Request):
        pass

    path = f"{__name__}.MyRequest"
    globals()["MyRequest"] = MyRequest
    with pytest.raises(UnencodableRequest, match="CLUSTERSYNC_REQUEST_CLASSES"):
        RequestCodec(None, 4096).encode(MyRequest("http://a"))
    allowed = RequestCodec(None, 4096, [path])
    assert type(allowed.decode(allowed.encode(MyRequest("http://a")))) is MyRequest
