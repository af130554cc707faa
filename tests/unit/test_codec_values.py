"""What Scrapy users put in meta and cb_kwargs comes back from Redis as it went in, no pickle."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import msgpack
import pytest
import scrapy
from scrapy import Request

from scrapy_clustersync.codec import RequestCodec, UndecodableEntry, UnencodableRequest

from .codec_cases import ALLOWED, Offer, Product, Spider

PARIS = ZoneInfo("Europe/Paris")


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec(Spider(), max_bytes=1 << 20, extra_classes=ALLOWED)


def round_trip(codec: RequestCodec, value: Any) -> Any:
    """``value`` put in a request's meta, encoded, decoded and read back."""
    return codec.decode(codec.encode(Request("http://a", meta={"v": value}))).meta["v"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param((1, "a", None), id="tuple stays tuple"),
        pytest.param(((1, 2), [3, (4,)]), id="tuples nested in lists"),
        pytest.param({1, 2, "x"}, id="set"),
        pytest.param(frozenset({"a", (1, 2)}), id="frozenset of a tuple"),
        pytest.param(dt.datetime(2024, 2, 29, 23, 59, 58, 123456), id="naive datetime"),
        pytest.param(dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc), id="datetime in UTC"),
        pytest.param(dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3.5))),
                     id="datetime at a fixed offset"),
        pytest.param(dt.date(1999, 12, 31), id="date"),
        pytest.param(dt.time(7, 8, 9, 10), id="time"),
        pytest.param(dt.time(7, 8, tzinfo=dt.timezone.utc), id="time with a time zone"),
        pytest.param(dt.timedelta(days=-2, seconds=3, microseconds=4), id="timedelta"),
        pytest.param(Decimal("-12.3400"), id="Decimal keeps its digits"),
        pytest.param(2**64, id="int just beyond 64 bits"),
        pytest.param(-(2**200) + 1, id="negative int beyond 64 bits"),
        pytest.param(2**64 - 1, id="largest 64-bit int"),
        pytest.param(b"\x00\xffbinary", id="bytes"),
        pytest.param({(1, 2): "tuple key"}, id="dict with a tuple key"),
        pytest.param(({"k": [(1, {2})]},), id="dict inside list inside tuple"),
    ],
)
def test_a_value_comes_back_equal_and_of_the_same_type(codec: RequestCodec, value: Any) -> None:
    # given a request whose meta holds the value; when it travels through Redis
    copy = round_trip(codec, value)
    # then it is the same value, of the same type (a tuple is not turned into a list)
    assert copy == value and type(copy) is type(value)
    if not isinstance(value, (set, frozenset)):  # a set's order depends on the string hash seed
        assert repr(copy) == repr(value)


def test_a_datetime_keeps_its_time_zone_and_fold(codec: RequestCodec) -> None:
    # given the second 02:30 of the night the clocks went back in Paris
    value = dt.datetime(2021, 10, 31, 2, 30, fold=1, tzinfo=PARIS)
    # when it travels
    copy = round_trip(codec, value)
    # then it is the same instant, in the same zone, with the same wall time
    assert copy == value and copy.tzinfo is PARIS and copy.fold == 1
    assert copy.utcoffset() == dt.timedelta(hours=1)


def test_cb_kwargs_keep_their_types(codec: RequestCodec) -> None:
    spider = codec.spider
    assert isinstance(spider, Spider)
    kwargs = {"seen": {"a"}, "when": dt.date(2020, 1, 1), "ids": (1, 2), "price": Decimal("1.5")}
    copy = codec.decode(codec.encode(Request("http://a", callback=spider.parse_item,
                                             cb_kwargs=kwargs)))
    assert copy.cb_kwargs == kwargs and type(copy.cb_kwargs["ids"]) is tuple


def test_a_nested_request_travels_with_its_callback_by_name(codec: RequestCodec) -> None:
    # given a request carrying, in meta, the next request to make (with a spider callback)
    spider = codec.spider
    assert isinstance(spider, Spider)
    nested = Request("http://a/next", callback=spider.parse_item, meta={"page": (2, 3)},
                     priority=4)
    # when it travels
    copy = round_trip(codec, nested)
    # then the nested request comes back whole, its callback resolved on this node's spider
    assert isinstance(copy, Request) and copy.url == "http://a/next" and copy.priority == 4
    assert copy.callback == spider.parse_item and copy.meta == {"page": (2, 3)}


def test_an_allowed_item_travels_with_its_class_and_fields(codec: RequestCodec) -> None:
    copy = round_trip(codec, [Product(name="pen", price=Decimal("2.50"))])
    assert type(copy[0]) is Product and dict(copy[0]) == {"name": "pen", "price": Decimal("2.50")}


def test_scrapys_own_item_and_dict_need_no_allow_list() -> None:
    codec = RequestCodec(None, 1 << 20)
    copy = round_trip(codec, {"item": scrapy.Item(), "plain": {"a": 1}})
    assert type(copy["item"]) is scrapy.Item and copy["plain"] == {"a": 1}


def test_an_allowed_dataclass_item_travels(codec: RequestCodec) -> None:
    assert round_trip(codec, Offer("s1", Decimal("9.99"))) == Offer("s1", Decimal("9.99"))


def test_an_item_class_not_allowed_cannot_travel_and_the_refusal_names_the_setting() -> None:
    codec = RequestCodec(None, 1 << 20)
    with pytest.raises(UnencodableRequest, match="CLUSTERSYNC_REQUEST_CLASSES") as error:
        codec.encode(Request("http://a", meta={"product": Product(name="pen")}))
    assert error.value.kind == f"item class {Product.__module__}.Product"


def test_an_item_class_not_allowed_here_is_never_loaded_from_redis(codec: RequestCodec) -> None:
    # given an entry written by a node that allowed a class this node does not allow
    blob = codec.encode(Request("http://a", meta={"p": Product(name="pen")}))
    # when this node reads it, the class is refused (the entry goes to the dead letters)
    with pytest.raises(UndecodableEntry, match="item class .*Product.* is not allowed"):
        RequestCodec(None, 1 << 20).decode(blob)


@pytest.mark.parametrize("version", [2, 3])
def test_an_unknown_extension_type_is_an_undecodable_entry(codec: RequestCodec,
                                                           version: int) -> None:
    meta = {"meta": {"x": msgpack.ExtType(99, b"\x90")}}
    payload = {"url": "http://a", **meta} if version == 2 else \
        msgpack.packb(["http://a", None, meta], use_bin_type=True)
    blob = msgpack.packb([version, payload], use_bin_type=True)
    with pytest.raises(UndecodableEntry, match="unknown extension type 99"):
        codec.decode(blob)


def test_a_value_without_an_encoding_is_named_with_its_type_and_key(codec: RequestCodec) -> None:
    with pytest.raises(UnencodableRequest, match=r"meta\['deep'\] holds a value of type object"):
        codec.encode(Request("http://a", meta={"deep": ({"x": [object()]},)}))
