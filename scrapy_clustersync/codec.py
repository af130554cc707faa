"""Requests to bytes and back: a versioned msgpack envelope, size-capped, and no pickle.

A request is encoded from ``Request.to_dict(spider=...)``: callbacks travel by name and are
resolved on the spider of the node that leases the request, so nothing read from Redis can run
code. Request subclasses are accepted only from Scrapy itself or from the
``CLUSTERSYNC_REQUEST_CLASSES`` allow-list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgpack
from scrapy import Request
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict

if TYPE_CHECKING:
    from scrapy import Spider

ENVELOPE_VERSION = 1
#: Meta keys this package sets on a leased request; they never travel to Redis.
LEASE_META_KEY = "clustersync_lease"
LOCAL_META_KEYS = frozenset({LEASE_META_KEY})


class UnencodableRequest(ValueError):
    """The request cannot be stored in Redis; the message names the request and the field."""


class UndecodableEntry(ValueError):
    """A queue entry cannot be turned back into a request; it goes to the dead letters."""


class RequestCodec:
    """Requests to envelopes and back, for one spider (None: callbacks stay names, the CLI).

    ``max_bytes`` caps an envelope; ``extra_request_classes`` are the Request subclasses from
    outside Scrapy that may travel (``CLUSTERSYNC_REQUEST_CLASSES``).
    """

    def __init__(
        self,
        spider: Spider | None,
        max_bytes: int,
        extra_request_classes: Iterable[str] = (),
    ) -> None:
        self.spider = spider
        self.max_bytes = max_bytes
        self.allowed_classes = frozenset(extra_request_classes)

    def encode(self, request: Request) -> bytes:
        """Return the envelope for ``request`` or raise :class:`UnencodableRequest`."""
        try:
            data = self._fast_dict(request) or request.to_dict(spider=self.spider)
        except ValueError as exc:  # a callback that is not a method of the spider
            raise UnencodableRequest(
                f"{request!r} cannot be queued: {exc}. Callbacks and errbacks must be methods of "
                "the spider so that another node can resolve them by name."
            ) from None
        class_path = data.get("_class")
        if class_path is not None and not self._class_allowed(class_path):
            raise UnencodableRequest(
                f"{request!r} cannot be queued: request class {class_path!r} is not allowed. "
                "Add it to CLUSTERSYNC_REQUEST_CLASSES on every node."
            )
        if any(key in data["meta"] for key in LOCAL_META_KEYS):
            data["meta"] = {k: v for k, v in data["meta"].items() if k not in LOCAL_META_KEYS}
        try:
            blob = _pack([ENVELOPE_VERSION, data])
        except (TypeError, ValueError, OverflowError):
            raise UnencodableRequest(self._describe_bad_field(request, data)) from None
        if len(blob) > self.max_bytes:
            raise UnencodableRequest(
                f"{request!r} cannot be queued: it encodes to {len(blob)} bytes, over "
                f"CLUSTERSYNC_MAX_REQUEST_BYTES ({self.max_bytes}). Keep large data out of "
                "meta/cb_kwargs/body or raise the limit."
            )
        return blob

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
            data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
        return data

    def decode(self, blob: bytes) -> Request:
        """Return the request in ``blob`` or raise :class:`UndecodableEntry` with the reason."""
        data = _request_data(blob)
        class_path = data.get("_class")
        if class_path is not None and not self._class_allowed(str(class_path)):
            raise UndecodableEntry(f"request class {class_path!r} is not allowed")
        try:
            request = request_from_dict(data, spider=self.spider)
        except Exception as exc:
            raise UndecodableEntry(f"cannot build the request: {exc}") from None
        if class_path is not None and not isinstance(request, Request):
            raise UndecodableEntry(f"{class_path!r} is not a scrapy Request")
        return request

    @staticmethod
    def with_callback(blob: bytes, callback: str) -> bytes:
        """``blob`` with its callback set to the spider method named ``callback``."""
        data = _request_data(blob)
        data["callback"] = callback
        return _pack([ENVELOPE_VERSION, data])

    def _class_allowed(self, class_path: str) -> bool:
        if class_path in self.allowed_classes:
            return True
        if not class_path.startswith("scrapy."):
            return False
        try:
            cls = load_object(class_path)
        except Exception:
            return False
        return isinstance(cls, type) and issubclass(cls, Request)

    @staticmethod
    def _describe_bad_field(request: Request, data: dict[str, Any]) -> str:
        for field in ("meta", "cb_kwargs"):
            for key, value in (data.get(field) or {}).items():
                if not _packable(key) or not _packable(value):
                    return (
                        f"{request!r} cannot be queued: {field}[{key!r}] holds a value of type "
                        f"{type(value).__name__}, which cannot be sent to other nodes. Use "
                        "str, bytes, int, float, bool, None, list or dict values."
                    )
        for key, value in data.items():
            if not _packable(value):
                return f"{request!r} cannot be queued: field {key!r} cannot be encoded."
        return f"{request!r} cannot be queued: it cannot be encoded."


def _request_data(blob: bytes) -> dict[str, Any]:
    """The request fields in the envelope ``blob``, or :class:`UndecodableEntry` saying why not."""
    try:
        envelope = msgpack.unpackb(blob, raw=False, strict_map_key=False)
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


def _pack(value: object) -> bytes:
    """``value`` in msgpack, str as str and bytes as bin; TypeError, ValueError or
    OverflowError for a value msgpack cannot hold."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _packable(value: object) -> bool:
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True
