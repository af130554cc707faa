"""Tasks and failed requests, as a node sees them: which task a request belongs to, and why a
request failed.

A task is the user's id in ``request.meta["clustersync_task"]`` (a str or an int, 1 to 200
characters); the requests a task's callback or errback yields inherit it unless they set their
own (``LeaseTracker``, where Scrapy's scraper takes a callback's or errback's output, after
every spider middleware). Its record is kept in Redis by the scripts (lua/tasks.lua) and read
by ``clustersync task``/``tasks``.

What counts as a failed request (recorded in the job's failed list and in its task):
- its download failed (an exception after the retries: connection refused, timeout, DNS...),
  whether or not an errback ran (the record says if one did);
- its response had an HTTP status Scrapy's ``HttpErrorMiddleware`` filtered ("HTTP 404"), with
  or without an errback;
- its callback (or errback) raised an exception (other than ``CloseSpider``: that request is
  handed back) that no spider middleware handled.
Not failed: a request a downloader middleware ignored (``IgnoreRequest``: offsite, robots.txt),
as Scrapy does not log those as errors either.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.httpobj import urlparse_cached

from ..store.write_ops import (
    REASON_MAX_CHARS,
    TASK_ID_MAX_CHARS,
    Failed,
    Push,
    TaskFiltered,
    TaskPush,
)

if TYPE_CHECKING:
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

TASK_META_KEY = "clustersync_task"
URL_MAX_CHARS = 2000
_warned: set[str] = set()


def task_of(request: Request) -> str | None:
    """The task ``request`` belongs to, or None. An id that is not a str or an int of 1 to 200
    characters is ignored, with a warning once per kind."""
    value = request.meta.get(TASK_META_KEY)
    if value is None:
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        task = str(value)
        if 0 < len(task) <= TASK_ID_MAX_CHARS:
            return task
    kind = type(value).__name__
    if kind not in _warned:
        _warned.add(kind)
        logger.warning("clustersync: meta[%r] = %r is no task id (a str or an int of 1 to %d "
                       "characters); the request is crawled without a task", TASK_META_KEY,
                       value, TASK_ID_MAX_CHARS)
    return None


def site_of(request: Request) -> str:
    """The site whose queue ``request`` joins in the frontier: Scrapy's download slot key (its
    ``download_slot`` meta, else its host name), without the DNS lookup that
    ``CONCURRENT_REQUESTS_PER_IP`` adds, which the node that pushes cannot wait for."""
    slot = request.meta.get("download_slot")
    if slot is not None:
        return str(slot).replace("\t", " ").replace("\n", " ")
    return urlparse_cached(request).hostname or ""


def push_of(request: Request, fingerprint: bytes, priority: int, blob: bytes,
            flags: int) -> Push:
    """The push of ``request``, encoded as ``blob``: a ``TaskPush`` if it belongs to a task."""
    task = task_of(request)
    if task is None:
        return Push(fingerprint, priority, blob, flags, site_of(request))
    return TaskPush(fingerprint, priority, blob, flags, site_of(request), task)


def filtered_here(request: Request) -> TaskFiltered | None:
    """The op that counts ``request``, dropped as a duplicate on this node, in its task's
    record; None if it belongs to no task (nothing to count)."""
    if TASK_META_KEY not in request.meta:  # the usual case, on every duplicate a callback yields
        return None
    task = task_of(request)
    return None if task is None else TaskFiltered(task)


def inherit_task(parent: Request, output: Any) -> None:
    """A request in ``output`` (a callback's or errback's) joins ``parent``'s task, unless it
    names its own."""
    task = parent.meta.get(TASK_META_KEY)
    if task is not None and isinstance(output, Request) and TASK_META_KEY not in output.meta:
        output.meta[TASK_META_KEY] = task


@dataclass(frozen=True)
class RequestFailure:
    """Why a request failed: the HTTP status (0: no response), the error, whether its errback
    ran."""

    status: int
    error: str
    errback: bool

    def op(self, entry_id: str, request: Request) -> Failed:
        """The ack of the leased ``entry_id`` that records this failure."""
        attempts = request.meta.get("retry_times", 0)
        attempts = attempts + 1 if isinstance(attempts, int) else 0
        return Failed(entry_id, _sendable(request.url[:URL_MAX_CHARS]), self.status,
                      _sendable(self.error[:REASON_MAX_CHARS]), attempts, self.errback)


def download_failure(failure: Failure, request: Request) -> RequestFailure | None:
    """What ``failure``, given to ``request``'s errback (or raised without one), says; None
    for a request a downloader middleware ignored."""
    exc = failure.value
    errback = request.errback is not None
    if isinstance(exc, HttpError):
        status = int(exc.response.status)
        return RequestFailure(status, f"HTTP {status}", errback)
    if isinstance(exc, IgnoreRequest):
        return None
    return RequestFailure(0, _described(exc), errback)


def spider_failure(failure: Failure, response: Any) -> RequestFailure:
    """A callback or errback that raised ``failure``, for ``response`` (a Response or the
    download's Failure)."""
    status = int(response.status) if isinstance(response, Response) else 0
    return RequestFailure(status, _described(failure.value), False)


def _sendable(text: str) -> str:
    """``text`` as Redis (UTF-8) can take it: a lone surrogate (half an emoji from a JSON
    API, a file name decoded with surrogateescape) cannot be encoded, and an op holding one
    would be refused at every try, stopping every later write of the node; it becomes a
    backslash escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _described(exc: BaseException | None) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
