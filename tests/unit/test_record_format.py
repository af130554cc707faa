"""A result goes into the stream and comes back as it was: the agreed record format."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import msgpack
import pytest

from scrapy_clustersync.results import Result, decode_record, encode_record, to_json_value
from scrapy_clustersync.results.record_format import CannotTravel


def a_result(kind: str = "item", data: dict[str, Any] | None = None, **fields: Any) -> Result:
    values: dict[str, Any] = dict(stream_id="", id="ab12:0", kind=kind, url="http://a/1",
                                  spider="listing", node="n1", at_ms=1_700_000_000_123,
                                  data={"title": "x"} if data is None else data)
    values.update(fields)
    return Result(**values)


def test_a_result_comes_back_with_the_stream_id_it_was_read_under() -> None:
    # given an item result; when it is written and read back as redis-py returns it
    fields = encode_record(a_result())
    back = decode_record(b"1700000000123-0", fields)
    # then every field is as it was and the stream id is the reader's cursor
    assert back == a_result(stream_id="1700000000123-0")
    assert set(fields) == {b"v", b"k", b"id", b"d"} and fields[b"v"] == b"1"


@pytest.mark.parametrize("value", [
    (1, "a"), {1, 2}, frozenset({"x"}), dt.datetime(2024, 2, 29, 1, 2, tzinfo=dt.timezone.utc),
    dt.date(1999, 12, 31), dt.time(7, 8), dt.timedelta(seconds=3), Decimal("1.2300"), 2**70,
    b"\x00\xff", {"nested": [(1, {2})]},
])
def test_item_values_keep_their_type(value: Any) -> None:
    # given an item field holding a value msgpack has no plain type for
    back = decode_record("1-0", encode_record(a_result(data={"v": value})))
    # then it comes back equal and of the same type
    assert back.data["v"] == value and type(back.data["v"]) is type(value)


def test_error_and_page_records_round_trip() -> None:
    error = {"status": 500, "error": "HttpError", "attempts": 3, "errback": False}
    page = {"status": 200, "headers": {"Content-Type": ["text/html"]}, "body": b"x\x9c",
            "encoding": "zlib"}
    for kind, data in (("error", error), ("page", page)):
        result = a_result(kind=kind, data=data, id=f"ab12:{kind}")
        assert decode_record("2-0", encode_record(result)).data == data


def test_a_start_item_has_no_url() -> None:
    back = decode_record("3-0", encode_record(a_result(url=None, id="start:0")))
    assert back.url is None and back.id == "start:0"


def test_crawled_at_is_the_node_clock_in_utc() -> None:
    assert a_result(at_ms=0).crawled_at == dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def test_a_value_without_an_encoding_is_refused_without_pickle() -> None:
    with pytest.raises(CannotTravel):
        encode_record(a_result(data={"f": object()}))


def test_an_unknown_kind_is_refused_when_written() -> None:
    with pytest.raises(ValueError, match="kind"):
        encode_record(a_result(kind="blob"))


@pytest.mark.parametrize(("fields", "reason"), [
    ({b"v": b"1", b"k": b"item", b"id": b"x"}, "no field 'd'"),
    ({b"v": b"2", b"k": b"item", b"id": b"x", b"d": b""}, "version '2'"),
    ({b"v": b"1", b"k": b"blob", b"id": b"x", b"d": b""}, "kind 'blob'"),
    ({b"v": b"1", b"k": b"item", b"id": b"x", b"d": b"\xc1"}, "result 9-0"),
    ({b"v": b"1", b"k": b"item", b"id": b"x", b"d": msgpack.packb([1])}, "no item map"),
    ({b"v": b"1", b"k": b"item", b"id": b"x",
      b"d": msgpack.packb({"item": {}, "url": 3, "at_ms": 1})}, "bad url"),
])
def test_a_bad_entry_is_a_clear_value_error(fields: dict[bytes, bytes], reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        decode_record("9-0", fields)
    assert "result 9-0" in str(caught.value)


def test_json_value_of_every_item_type_dumps() -> None:
    value = {"when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
             "day": dt.date(2024, 1, 2), "price": Decimal("9.90"), "raw": b"\x00\x01",
             "tags": {"b", "a"}, "nums": {10, 9}, "mixed": {1, "a"}, "pair": (1, 2),
             (1, 2): "tuple key", "span": dt.timedelta(minutes=1), "big": 2**70}
    converted = to_json_value(value)
    json.dumps(converted)
    assert converted["when"] == "2024-01-02T03:04:05+00:00"
    assert converted["price"] == "9.90" and converted["raw"] == "AAE="
    assert converted["tags"] == ["a", "b"] and converted["nums"] == [9, 10]
    assert converted["pair"] == [1, 2] and converted["span"] == 60.0
    assert converted["[1, 2]"] == "tuple key" and len(converted["mixed"]) == 2


def test_json_value_refuses_an_unknown_type() -> None:
    with pytest.raises(TypeError):
        to_json_value(object())
