"""Requests of every kind a crawl queues, for the codec's round-trip tests
(test_codec_round_trip.py), and how to compare two requests attribute by attribute."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import scrapy
from scrapy import Request
from scrapy.http import FormRequest, JsonRequest, Response
from twisted.python.failure import Failure

URL = "https://shop42.example.com/catalogue/category/books/p-7.html"


class Spider(scrapy.Spider):
    name = "cases"

    def parse_item(self, response: Response) -> None:  # pragma: no cover - resolved by name only
        pass

    def on_error(self, failure: Failure) -> None:  # pragma: no cover
        pass


class Product(scrapy.Item):
    name = scrapy.Field()
    price = scrapy.Field()


@dataclasses.dataclass
class Offer:
    shop: str
    price: Decimal


class PagedRequest(Request):
    """A Request subclass of a project, with an attribute of its own."""

    attributes = (*Request.attributes, "page")

    def __init__(self, *args: Any, page: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.page = page


ALLOWED = [f"{__name__}.{name}" for name in ("Product", "Offer", "PagedRequest")]

#: a value of every type the codec carries in meta and cb_kwargs
EVERY_TYPE: dict[str, Any] = {
    "depth": 3,
    "tuple": (1, "a", None, (2, [3, (4,)])),
    "set": {1, 2, "x"},
    "frozenset": frozenset({"a", (1, 2)}),
    "naive datetime": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "datetime in a zone": dt.datetime(2021, 10, 31, 2, 30, fold=1,
                                      tzinfo=ZoneInfo("Europe/Paris")),
    "datetime at an offset": dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3.5))),
    "date": dt.date(1999, 12, 31),
    "time": dt.time(7, 8, 9, 10, tzinfo=dt.timezone.utc),
    "timedelta": dt.timedelta(days=-2, seconds=3, microseconds=4),
    "decimal": Decimal("-12.3400"),
    "big int": 2**64,
    "negative big int": -(2**200) + 1,
    "bytes": b"\x00\xffbinary",
    "float": 1.5,
    "tuple key": {(1, 2): "value"},
    "nested": [{"k": ({"a"},)}],
}


def cases(spider: Spider) -> dict[str, Request]:
    """One request per kind, by name; callbacks are methods of ``spider``."""
    return {
        "url only": Request(URL),
        "url and callback": Request(URL, callback=spider.parse_item),
        "every attribute": Request(
            URL, callback=spider.parse_item, errback=spider.on_error, method="PUT",
            headers={"X-Many": ["a", "b"], "Referer": URL}, body=b"\x00\xff", cookies={"sid": "1"},
            meta=EVERY_TYPE, encoding="latin-1", priority=-3, dont_filter=True,
            flags=["f1", "f2"], cb_kwargs={"page": 2, "seen": {"a"}, "when": dt.date(2020, 1, 1)}),
        "cookies as a list": Request(URL, cookies=[
            {"name": "a", "value": "1", "domain": "example.com", "path": "/"},
            {"name": "b", "value": "2"}]),
        "errback only": Request(URL, errback=spider.on_error),
        "priority": Request(URL, callback=spider.parse_item, priority=5),
        "dont_filter": Request(URL, dont_filter=True),
        "flags": Request(URL, flags=["seed"]),
        "encoding": Request(URL + "?q=caf\u00e9", encoding="cp1252"),
        "verbatim URL": Request("http://example.com/a b?c=d e", meta={"verbatim_url": True}),
        "nested requests": Request(URL, callback=spider.parse_item, meta={
            "next": Request(URL + "?p=2", callback=spider.parse_item, meta={"page": (2, 3)},
                            priority=4),
            "chain": [Request(URL + "?p=3"), FormRequest(URL, formdata={"a": "b"})]}),
        "items": Request(URL, meta={"product": Product(name="pen", price=Decimal("2.50")),
                                    "offer": Offer("s1", Decimal("9.99")),
                                    "scrapy item": scrapy.Item()}),
        "FormRequest": FormRequest(URL, callback=spider.parse_item,
                                   formdata={"q": "books", "page": "2"}),
        "JsonRequest": JsonRequest(URL, data={"a": [1, 2]}, dumps_kwargs={"indent": 2}),
        "allowed subclass": PagedRequest(URL, callback=spider.parse_item, page=7,
                                         meta={"depth": 1}),
        "plain values given explicitly": Request(
            URL, method="GET", headers={}, body=b"", cookies={}, meta={}, encoding="utf-8",
            priority=0, dont_filter=False, flags=[], cb_kwargs={}),
    }


def shape(value: Any) -> Any:
    """``value`` with the type of every part beside it: two shapes are equal when the values
    are equal and of the same types all the way down (a tuple is not a list, a datetime keeps
    its zone and fold)."""
    if isinstance(value, Request):
        return type(value), {name: shape(getattr(value, name)) for name in value.attributes}
    if isinstance(value, scrapy.Item):
        return type(value), shape(dict(value))
    if isinstance(value, dict):
        return type(value), {key: shape(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value), [shape(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return type(value), sorted(repr(shape(item)) for item in value)
    if isinstance(value, (dt.datetime, dt.time)):
        return type(value), repr(value)
    return type(value), value
