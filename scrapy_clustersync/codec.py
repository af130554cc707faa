"""Requests to bytes and back: a versioned msgpack envelope, size-capped, and no pickle.

A request is encoded from ``Request.to_dict(spider=...)``: callbacks travel by name and are
resolved on the spider of the node that leases the request, so nothing read from Redis can run
code. Values Scrapy users put in ``meta`` and ``cb_kwargs`` that msgpack has no type for travel
as msgpack extension types (``Ext``): tuples stay tuples, sets, dates and times, Decimals, ints
beyond 64 bits, Items and nested Requests. Classes travel by import path and are loaded only
from Scrapy itself or from the ``CLUSTERSYNC_REQUEST_CLASSES`` allow-list (Request subclasses
and Item classes alike: both are code a node would import because Redis says so).

The envelope is ``[ENVELOPE_VERSION, fields]``; version 2, with the extension types, is the
format baseline of 0.1.0, the first release. An entry of any other version is undecodable (a
dead letter naming its version), so a later format is never misread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import msgpack
from scrapy import Item, Request
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict

from .codec_exts import SIMPLE_DECODERS, SIMPLE_EXTS, CannotTravel, Ext, as_plain, int_bytes

if TYPE_CHECKING:
    from scrapy import Spider

ENVELOPE_VERSION = 2
#: Meta keys this package sets on a leased request; they never travel to Redis. Private (the
#: leading underscore): a spider must not copy one into a new request by hand (README).
LEASE_META_KEY = "_clustersync_lease"
LOCAL_META_KEYS = frozenset({LEASE_META_KEY})


class UnencodableRequest(ValueError):
    """The request cannot be stored in Redis; the message names the request and the field.

    ``reason`` is the message without the request (what is wrong and what to do about it);
    ``kind`` names what is wrong in a few words (the same for every request with the same
    problem), so that a node can warn once per kind.
    """

    def __init__(self, request: Request, reason: str, kind: str) -> None:
        super().__init__(f"{request!r} cannot be queued: {reason}")
        self.reason = reason
        self.kind = kind


class UndecodableEntry(ValueError):
    """A queue entry cannot be turned back into a request; it goes to the dead letters."""


class RequestCodec:
    """Requests to envelopes and back, for one spider (None: callbacks stay names, the CLI).

    ``max_bytes`` caps an envelope; ``extra_classes`` are the Request subclasses and Item
    classes from outside Scrapy that may travel (``CLUSTERSYNC_REQUEST_CLASSES``).
    """

    def __init__(
        self,
        spider: Spider | None,
        max_bytes: int,
        extra_classes: Iterable[str] = (),
    ) -> None:
        self.spider = spider
        self.max_bytes = max_bytes
        self.allowed_classes = frozenset(extra_classes)
        self._class_checks: dict[tuple[str, type], bool] = {}

    # ---- encoding ------------------------------------------------------------------------
    def encode(self, request: Request) -> bytes:
        """Return the envelope for ``request`` or raise :class:`UnencodableRequest`."""
        data = self._request_dict(request)
        try:
            blob = self._pack([ENVELOPE_VERSION, data])
        except UnencodableRequest as exc:  # a nested request that cannot travel
            raise UnencodableRequest(request, f"it holds a request that cannot travel: {exc}",
                                     exc.kind) from None
        except (TypeError, ValueError, OverflowError):
            raise self._describe_bad_field(request, data) from None
        if len(blob) > self.max_bytes:
            raise UnencodableRequest(
                request, f"it encodes to {len(blob)} bytes, over "
                f"CLUSTERSYNC_MAX_REQUEST_BYTES ({self.max_bytes}). Keep large data out of "
                "meta/cb_kwargs/body or raise the limit.",
                "requests over CLUSTERSYNC_MAX_REQUEST_BYTES",
            )
        return blob

    def _request_dict(self, request: Request) -> dict[str, Any]:
        """``request`` as ``to_dict`` gives it, checked: callbacks by name, class allowed."""
        try:
            data = self._fast_dict(request) or request.to_dict(spider=self.spider)
        except ValueError as exc:  # a callback that is not a method of the spider
            raise UnencodableRequest(
                request, f"{exc}. Callbacks and errbacks must be methods of "
                "the spider so that another node can resolve them by name.",
                "callbacks that are not spider methods (lambda, functools.partial, function)",
            ) from None
        class_path = data.get("_class")
        if class_path is not None and not self._class_allowed(class_path, Request):
            raise UnencodableRequest(
                request, f"request class {class_path!r} is not allowed. "
                "Add it to CLUSTERSYNC_REQUEST_CLASSES on every node.",
                f"request class {class_path}",
            )
        if any(key in data["meta"] for key in LOCAL_META_KEYS):
            data["meta"] = {k: v for k, v in data["meta"].items() if k not in LOCAL_META_KEYS}
        return data

    def _fast_dict(self, request: Request) -> dict[str, Any] | None:
        """``request.to_dict(spider=...)`` without its scan of every spider member per request.

        Returns None when a callback is not plainly a method of the spider; to_dict then decides.
        """
        names: list[str | None] = []
        for func in (request.callback, request.errback):
            if func is None or isinstance(func, str):
                names.append(func)
                continue
            name = getattr(func, "__name__", None)
            if getattr(func, "__self__", None) is not self.spider or name is None or \
                    getattr(self.spider, name, None) != func:
                return None
            names.append(name)
        data: dict[str, Any] = {"url": request.url, "callback": names[0], "errback": names[1],
                                "headers": dict(request.headers)}
        for attr in request.attributes:
            data.setdefault(attr, getattr(request, attr))
        if type(request) is not Request:
            data["_class"] = _class_path(type(request))
        return data

    def _pack(self, value: object) -> bytes:
        """``value`` in msgpack (str as str, bytes as bin, the rest through ``_ext``)."""
        packed: bytes = msgpack.packb(value, use_bin_type=True, strict_types=True,
                                      default=self._ext)
        return packed

    def _ext(self, value: Any) -> Any:
        """msgpack's ``default`` hook: the extension type for ``value``, or a plain value."""
        if isinstance(value, Request):
            return msgpack.ExtType(Ext.REQUEST, self._pack(self._request_dict(value)))
        if isinstance(value, Item) or _is_dataclass_item(value):
            return msgpack.ExtType(Ext.ITEM, self._pack(self._item_record(value)))
        if type(value) is int:  # msgpack calls the hook for an int beyond 64 bits
            return msgpack.ExtType(Ext.BIG_INT, self._pack(int_bytes(value)))
        for kind, convert in SIMPLE_EXTS:
            if isinstance(value, kind):
                code, payload = convert(value)
                return msgpack.ExtType(code, self._pack(payload))
        return as_plain(value)

    def _item_record(self, item: Any) -> list[Any]:
        path = _class_path(type(item))
        if not self._class_allowed(path, object):
            raise CannotTravel(f"item class {path}",
                                "Add it to CLUSTERSYNC_REQUEST_CLASSES on every node.")
        if isinstance(item, Item):
            return [path, dict(item)]
        return [path, {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}]

    def _describe_bad_field(self, request: Request, data: dict[str, Any]) -> UnencodableRequest:
        for field in ("meta", "cb_kwargs"):
            for key, value in (data.get(field) or {}).items():
                problem = self._problem_with(key) or self._problem_with(value)
                if problem is not None:
                    return UnencodableRequest(
                        request, f"{field}[{key!r}] holds "
                        f"{problem.kind.replace('values', 'a value', 1)}, which cannot be sent "
                        f"to other nodes. {problem.advice}", problem.kind)
        for key, value in data.items():
            problem = self._problem_with(value)
            if problem is not None:
                return UnencodableRequest(
                    request, f"field {key!r} holds {problem.kind}, which "
                    "cannot be encoded.", problem.kind)
        return UnencodableRequest(request, "it cannot be encoded.",
                                  "requests that cannot be encoded")

    def _problem_with(self, value: object) -> CannotTravel | None:
        try:
            self._pack(value)
        except CannotTravel as exc:
            return exc
        except (TypeError, ValueError, OverflowError) as exc:
            return CannotTravel(f"values msgpack refuses ({exc})", "")
        return None

    # ---- decoding ------------------------------------------------------------------------
    def decode(self, blob: bytes) -> Request:
        """Return the request in ``blob`` or raise :class:`UndecodableEntry` with the reason.

        Decoding is capped as encoding is: an envelope over ``max_bytes`` is refused unread
        (a msgpack map of tiny entries takes about 50 times its size in memory, so a decoded
        entry holds at most about that; msgpack caps every length inside by the envelope's).
        Nothing an entry holds raises anything else: what goes wrong is an UndecodableEntry, so
        the entry goes to the dead letters with its reason and the node crawls on."""
        if len(blob) > self.max_bytes:
            raise UndecodableEntry(
                f"it is {len(blob)} bytes, over this node's CLUSTERSYNC_MAX_REQUEST_BYTES "
                f"({self.max_bytes}); it is not read")
        try:
            return self._request_from(_request_data(blob, self._from_ext))
        except UndecodableEntry:
            raise
        except Exception as exc:  # MemoryError, RecursionError, a class that fails to build
            raise UndecodableEntry(f"cannot be decoded: {type(exc).__name__}: {exc}") from None

    def _request_from(self, data: dict[str, Any]) -> Request:
        class_path = data.get("_class")
        if class_path is not None and not self._class_allowed(str(class_path), Request):
            raise UndecodableEntry(f"request class {class_path!r} is not allowed")
        try:
            request = request_from_dict(data, spider=self.spider)
        except Exception as exc:
            raise UndecodableEntry(f"cannot build the request: {exc}") from None
        if class_path is not None and not isinstance(request, Request):
            raise UndecodableEntry(f"{class_path!r} is not a scrapy Request")
        return request

    def _from_ext(self, code: int, payload: bytes) -> Any:
        """msgpack's ``ext_hook``: the value of one extension type."""
        value = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=self._from_ext)
        if code == Ext.REQUEST:
            return self._request_from(value)
        if code == Ext.ITEM:
            return self._item_from(value)
        build = SIMPLE_DECODERS.get(code)
        if build is None:
            raise UndecodableEntry(f"unknown extension type {code}")
        try:
            return build(value)
        except Exception as exc:
            raise UndecodableEntry(f"bad {Ext(code).name.lower()} value: {exc}") from None

    def _item_from(self, record: Any) -> Any:
        path, fields = record
        if not self._class_allowed(str(path), object):
            raise UndecodableEntry(f"item class {path!r} is not allowed")
        cls = load_object(path)
        try:
            return cls(fields) if issubclass(cls, Item) else cls(**fields)
        except Exception as exc:
            raise UndecodableEntry(f"cannot build the item {path!r}: {exc}") from None

    def url_encoder(self, template: Request,
                    callback: str | None = None) -> Callable[[str], bytes]:
        """An encoder of requests that differ from ``template`` only in their URL.

        ``encoder(url)`` is ``encode(template.replace(url=url))`` (with its callback set to
        ``callback`` if given), without building a Request per URL;
        ``url`` as a Request holds it (after ``safe_url_string``). The CLI's seed uses it.
        """
        data = self._request_dict(template)
        if callback:
            data["callback"] = callback

        def encode(url: str) -> bytes:
            blob = self._pack([ENVELOPE_VERSION, {**data, "url": url}])
            if len(blob) > self.max_bytes:
                raise UnencodableRequest(template.replace(url=url), "its URL is too long",
                                         "requests over CLUSTERSYNC_MAX_REQUEST_BYTES")
            return blob

        return encode

    # ---- classes -------------------------------------------------------------------------
    def _class_allowed(self, class_path: str, base: type) -> bool:
        """Whether ``class_path`` may travel: listed, or a Scrapy ``base`` (or Item, for object)."""
        key = (class_path, base)
        if key not in self._class_checks:
            self._class_checks[key] = class_path in self.allowed_classes or (
                class_path.startswith("scrapy.") and _is_scrapy_class(class_path, base))
        return self._class_checks[key]


def _is_scrapy_class(class_path: str, base: type) -> bool:
    try:
        cls = load_object(class_path)
    except Exception:
        return False
    wanted = base if base is not object else Item
    return isinstance(cls, type) and issubclass(cls, wanted)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def _is_dataclass_item(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _request_data(blob: bytes, ext_hook: Callable[[int, bytes], Any]) -> dict[str, Any]:
    """The request fields in the envelope ``blob``, or :class:`UndecodableEntry` saying why not.

    ``ext_hook`` builds each extension value (msgpack's ``ext_hook``). msgpack caps every
    length inside by the length of the buffer it reads, so the caller's cap on ``blob`` bounds
    them all.
    """
    try:
        envelope = msgpack.unpackb(blob, raw=False, strict_map_key=False, ext_hook=ext_hook)
    except UndecodableEntry:
        raise
    except Exception as exc:
        raise UndecodableEntry(f"not a msgpack envelope: {exc}") from None
    if not (isinstance(envelope, list) and len(envelope) == 2):
        raise UndecodableEntry("not a [version, request] envelope")
    version, data = envelope
    if version != ENVELOPE_VERSION:
        raise UndecodableEntry(
            f"envelope version {version!r}; this node reads version {ENVELOPE_VERSION}"
        )
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise UndecodableEntry("request data without a url")
    return data
