"""Requests to bytes and back: a versioned msgpack envelope, size-capped, and no pickle.

A request travels as what sets it apart from a plain ``Request(url)``: its URL, its callback and
errback by name, resolved on the spider of the node that leases the request (so nothing read
from Redis can run code), and each other attribute of ``Request.attributes`` whose value is not
the plain one. Values Scrapy users put in ``meta`` and ``cb_kwargs`` that msgpack has no type for
travel as msgpack extension types (``Ext``): tuples stay tuples, sets, dates and times, Decimals,
ints beyond 64 bits, Items and nested Requests. Classes travel by import path and are loaded only
from Scrapy itself or from the ``CLUSTERSYNC_REQUEST_CLASSES`` allow-list (Request subclasses
and Item classes alike: both are code a node would import because Redis says so).

The envelope is ``[version, payload]``. Version 3, the one this node writes, has as payload
the msgpack bytes of ``[url, callback, fields]``: the callback's name (or None) and a map of
the other attributes that differ from a plain Request's (``_class`` too, for a subclass), the
empty end left out, so that a URL with a callback costs its length and about a dozen bytes; a
nested Request's extension value holds the same list. Decoding builds ``cls(url=...,
callback=..., **fields)`` as ``request_from_dict`` does (a subclass gets the plain value of each
attribute left out, as version 2 gave it every one). The payload is packed apart so that the
version is read before anything in it: an entry of a version this node does not read is
undecodable whatever it holds (a dead letter naming its version), so a later format is never
misread. Version 2, which 0.1.0 writes, is ``[2, Request.to_dict() map]``; it is still read,
so what a 0.1.0 node queued is crawled after an upgrade. A 0.1.0 node reads a version 3 entry
as undecodable: it dead-letters it with the reason "envelope version 3; this node reads
version 2" (docs/operations.md, "Upgrading").
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import msgpack
from scrapy import Item, Request
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict

from .codec_envelope import (
    ENVELOPE_VERSION,
    PLAIN_FIELDS,
    UndecodableEntry,
    envelope,
    envelope_of,
    layout_of,
    split_fields,
    trimmed,
    unpack_fields,
    v2_data,
)
from .codec_exts import SIMPLE_DECODERS, SIMPLE_EXTS, CannotTravel, Ext, as_plain, int_bytes

if TYPE_CHECKING:
    from scrapy import Spider

#: Meta keys this package sets on a leased request; they never travel to Redis. Private (the
#: leading underscore): a spider must not copy one into a new request by hand (README).
LEASE_META_KEY = "_clustersync_lease"
LOCAL_META_KEYS = frozenset({LEASE_META_KEY})
#: Scrapy's meta key for a URL to keep as given (decoding sets it while it builds a request)
VERBATIM_URL_KEY = "verbatim_url"
_VERBATIM_META = {VERBATIM_URL_KEY: True}  # (copied by Request: never changed)
__all__ = ["LEASE_META_KEY", "LOCAL_META_KEYS", "RequestCodec", "UndecodableEntry",
           "UnencodableRequest"]


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


class RequestCodec:
    """Requests to envelopes and back, for one spider (None: callbacks stay names, the CLI).

    ``max_bytes`` caps an envelope; ``extra_classes`` are the Request subclasses and Item
    classes from outside Scrapy that may travel (``CLUSTERSYNC_REQUEST_CLASSES``). A codec
    serves one thread at a time (the reactor's, on a node): it reuses one msgpack packer.
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
        self._request_classes: dict[str, type[Request]] = {}
        # packing the fields of an envelope is its costliest step after building the request;
        # a packer made once saves most of it (nested values are packed by packb: the packer
        # is in use while its ``default`` hook runs)
        self._packer = msgpack.Packer(use_bin_type=True, strict_types=True, default=self._ext)

    # ---- encoding ------------------------------------------------------------------------
    def encode(self, request: Request) -> bytes:
        """Return the envelope for ``request`` or raise :class:`UnencodableRequest`."""
        fields = self._fields(request)
        try:
            blob = envelope(self._packer.pack(fields))
        except UnencodableRequest as exc:  # a nested request that cannot travel
            raise UnencodableRequest(request, f"it holds a request that cannot travel: {exc}",
                                     exc.kind) from None
        except (TypeError, ValueError, OverflowError):
            raise self._describe_bad_field(request, fields[-1] if len(fields) > 2 else {}) \
                from None
        if len(blob) > self.max_bytes:
            raise UnencodableRequest(
                request, f"it encodes to {len(blob)} bytes, over "
                f"CLUSTERSYNC_MAX_REQUEST_BYTES ({self.max_bytes}). Keep large data out of "
                "meta/cb_kwargs/body or raise the limit.",
                "requests over CLUSTERSYNC_MAX_REQUEST_BYTES",
            )
        return blob

    def _fields(self, request: Request) -> list[Any]:
        """``[url, callback, fields]`` of ``request`` (version 3), without its empty end."""
        callback, errback = self._callback_names(request)
        fields = self._changed_fields(request)
        if errback is not None:
            fields["errback"] = errback
        return trimmed(request.url, callback, fields)

    def _callback_names(self, request: Request) -> tuple[str | None, str | None]:
        """The names of the callback and errback of ``request`` on the spider (None: none).

        A method of the spider is named by its ``__name__``; anything else is left to
        ``to_dict``, which finds a method under another name or refuses.
        """
        names: list[str | None] = []
        for func in (request.callback, request.errback):
            if func is None or isinstance(func, str):
                names.append(func)
                continue
            name = getattr(func, "__name__", None)
            if getattr(func, "__self__", None) is not self.spider or name is None or \
                    getattr(self.spider, name, None) != func:
                return self._callback_names_by_scan(request)
            names.append(name)
        return names[0], names[1]

    def _callback_names_by_scan(self, request: Request) -> tuple[str | None, str | None]:
        try:
            data = request.to_dict(spider=self.spider)
        except ValueError as exc:  # a callback that is not a method of the spider
            raise UnencodableRequest(
                request, f"{exc}. Callbacks and errbacks must be methods of "
                "the spider so that another node can resolve them by name.",
                "callbacks that are not spider methods (lambda, functools.partial, function)",
            ) from None
        return data["callback"], data["errback"]

    def _changed_fields(self, request: Request) -> dict[str, Any]:
        """The attributes of ``request`` that differ from a plain Request's (and its class)."""
        fields: dict[str, Any] = {}
        headers = request.headers
        if headers:
            fields["headers"] = dict(headers)
        meta = _meta_to_send(request.meta)
        if meta:
            fields["meta"] = meta
        cls = type(request)
        layout = layout_of(cls)
        for name, plain in layout.compared:
            value = getattr(request, name)
            if value != plain or type(value) is not type(plain):
                fields[name] = value
        if cls is not Request:
            fields["_class"] = self._class_path_to_send(request)
            fields.update((name, getattr(request, name)) for name in layout.extra)
        return fields

    def _class_path_to_send(self, request: Request) -> str:
        class_path = _class_path(type(request))
        if not self._class_allowed(class_path, Request):
            raise UnencodableRequest(
                request, f"request class {class_path!r} is not allowed. "
                "Add it to CLUSTERSYNC_REQUEST_CLASSES on every node.",
                f"request class {class_path}",
            )
        return class_path

    def _pack(self, value: object) -> bytes:
        """``value`` in msgpack (str as str, bytes as bin, the rest through ``_ext``)."""
        packed: bytes = msgpack.packb(value, use_bin_type=True, strict_types=True,
                                      default=self._ext)
        return packed

    def _ext(self, value: Any) -> Any:
        """msgpack's ``default`` hook: the extension type for ``value``, or a plain value."""
        if isinstance(value, Request):
            return msgpack.ExtType(Ext.REQUEST, self._pack(self._fields(value)))
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

    def url_encoder(self, template: Request,
                    callback: str | None = None) -> Callable[[str], bytes]:
        """An encoder of requests that differ from ``template`` only in their URL.

        ``encoder(url)`` is ``encode(template.replace(url=url))`` (with its callback set to
        ``callback`` if given), without building a Request per URL;
        ``url`` as a Request holds it (after ``safe_url_string``). The CLI's seed uses it.
        """
        fields = self._fields(template)
        if callback:
            fields[1:2] = [callback]
        rest = fields[1:]
        pack = self._packer.pack

        def encode(url: str) -> bytes:
            blob = envelope(pack([url, *rest]))
            if len(blob) > self.max_bytes:
                raise UnencodableRequest(template.replace(url=url), "its URL is too long",
                                         "requests over CLUSTERSYNC_MAX_REQUEST_BYTES")
            return blob

        return encode

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
            version, payload = envelope_of(blob)
            if version == ENVELOPE_VERSION:
                return self._request_of(unpack_fields(payload, self._from_ext))
            return self._request_from(v2_data(blob, self._from_ext))
        except UndecodableEntry:
            raise
        except Exception as exc:  # MemoryError, RecursionError, a class that fails to build
            raise UndecodableEntry(f"cannot be decoded: {type(exc).__name__}: {exc}") from None

    def _request_of(self, fields: Any) -> Request:
        """The request of version 3 ``fields``, built as ``request_from_dict`` builds one: the
        class from ``_class``, callbacks resolved by name on the spider, the rest as given."""
        url, name, changed = split_fields(fields)
        callback: Any = name
        cls, kwargs = self._class_and_kwargs(changed) if changed else (Request, changed)
        if name and self.spider is not None:
            callback = self._spider_method(name)
        if cls is Request:
            return self._plain_request(url, callback, kwargs)
        try:
            return cls(url=url, callback=callback, **kwargs)
        except Exception as exc:
            raise UndecodableEntry(f"cannot build the request: {exc}") from None

    @staticmethod
    def _plain_request(url: Any, callback: Any, kwargs: dict[str, Any]) -> Request:
        """A ``Request`` of an entry's fields. Its URL is the one a Request held when it was
        encoded (``url_encoder``'s too), so ``safe_url_string`` made it safe already: Scrapy is
        told to take it as it is (``verbatim_url``, for the build only), which gives the same
        URL without parsing it again."""
        meta = kwargs.get("meta")
        verbatim = not (isinstance(meta, dict) and VERBATIM_URL_KEY in meta)
        if verbatim:  # (``kwargs`` may be shared: it is left as it is; Request copies meta)
            kwargs = {**kwargs, "meta": {**meta, **_VERBATIM_META} if meta else _VERBATIM_META}
        try:
            request = Request(url=url, callback=callback, **kwargs)
        except Exception as exc:
            raise UndecodableEntry(f"cannot build the request: {exc}") from None
        if verbatim:
            del request.meta[VERBATIM_URL_KEY]
        return request

    def _class_and_kwargs(self, changed: dict[str, Any]) -> tuple[type[Request], dict[str, Any]]:
        """The class of the request whose fields but URL and callback are ``changed`` (taken
        apart), and the keyword arguments to build it with."""
        cls = self._request_class(changed.pop("_class")) if "_class" in changed else Request
        accepted = layout_of(cls).accepted
        for name in changed:
            if name not in accepted:
                raise UndecodableEntry(f"unknown field {name!r} of a {_class_path(cls)}")
        errback = changed.get("errback")
        if errback and self.spider is not None:
            changed["errback"] = self._spider_method(errback)
        if cls is Request:
            return cls, changed
        # the attributes left out are the plain ones: given, since the class's own defaults may
        # differ (as request_from_dict gives it every attribute of a version 2 entry)
        return cls, {**{name: copy.copy(value) for name, value in PLAIN_FIELDS.items()
                        if name in accepted}, **changed}

    def _spider_method(self, name: object) -> Any:
        try:
            return getattr(self.spider, str(name))
        except AttributeError:
            raise UndecodableEntry(f"cannot build the request: Method {name!r} not found in: "
                                   f"{self.spider}") from None

    def _request_class(self, class_path: object) -> type[Request]:
        """The allowed Request class ``class_path`` names, loaded once."""
        cls = self._request_classes.get(str(class_path))
        if cls is not None:
            return cls
        if not isinstance(class_path, str) or not self._class_allowed(class_path, Request):
            raise UndecodableEntry(f"request class {class_path!r} is not allowed")
        try:
            loaded = load_object(class_path)
        except Exception as exc:
            raise UndecodableEntry(f"cannot load request class {class_path!r}: {exc}") from None
        if not (isinstance(loaded, type) and issubclass(loaded, Request)):
            raise UndecodableEntry(f"{class_path!r} is not a scrapy Request")
        self._request_classes[class_path] = loaded
        return loaded

    def _request_from(self, data: dict[str, Any]) -> Request:
        """The request of a version 2 ``to_dict`` map, by ``request_from_dict``."""
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
        if code == Ext.REQUEST:  # its fields as its envelope's version holds them
            return self._request_from(value) if isinstance(value, dict) else \
                self._request_of(value)
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


def _meta_to_send(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without the keys that stay on this node (LOCAL_META_KEYS)."""
    if meta and not LOCAL_META_KEYS.isdisjoint(meta):
        return {key: value for key, value in meta.items() if key not in LOCAL_META_KEYS}
    return meta
