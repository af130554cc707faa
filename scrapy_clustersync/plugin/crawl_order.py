"""Scrapy's crawl order within a priority, read from the project's queue settings.

Scrapy's scheduler keeps one queue per priority, higher priorities first. Within a priority it
serves the other requests before the start requests, each from the queue class its settings
name: ``SCHEDULER_MEMORY_QUEUE`` (``SCHEDULER_DISK_QUEUE`` with ``JOBDIR``) for the others,
LIFO by default (depth-first); ``SCHEDULER_START_MEMORY_QUEUE`` (``SCHEDULER_START_DISK_QUEUE``)
for start requests, FIFO by default, or the others' queue when that setting is empty. The job's
queue in Redis keeps the same order (flush.lua's entry ids); ``QueueOrder`` is what a node reads
from its settings and puts in the flags of each push.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from scrapy.utils.misc import load_object

from ..store.write_ops import PushFlags

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueOrder:
    """``lifo``: the other requests come newest first. ``start_lifo``: so do start requests,
    which come after the others of their priority; None: start requests share the others'
    queue (Scrapy's ``SCHEDULER_START_*_QUEUE = None``)."""

    lifo: bool = True
    start_lifo: bool | None = False

    @classmethod
    def from_settings(cls, settings: Any) -> QueueOrder:
        """The order a plain Scrapy of these settings follows (the disk queues with JOBDIR)."""
        where = "DISK" if settings.get("JOBDIR") else "MEMORY"
        lifo = _is_lifo(settings, f"SCHEDULER_{where}_QUEUE")
        start_name = f"SCHEDULER_START_{where}_QUEUE"
        start_lifo = _is_lifo(settings, start_name) if settings.get(start_name) else None
        return cls(lifo, start_lifo)

    def flags(self, is_start: bool) -> PushFlags:
        """The order flags of a push (``is_start``: the request came from the spider's start)."""
        if is_start and self.start_lifo is not None:
            return PushFlags.START | PushFlags.LIFO if self.start_lifo else PushFlags.START
        return PushFlags.LIFO if self.lifo else PushFlags(0)

    def describe(self) -> str:
        """For the log: e.g. ``LIFO, start requests FIFO after the others``."""
        if self.start_lifo is None:
            return f"{_name(self.lifo)}, start requests in the same queue"
        return f"{_name(self.lifo)}, start requests {_name(self.start_lifo)} after the others"


def _name(lifo: bool) -> str:
    return "LIFO" if lifo else "FIFO"


def _is_lifo(settings: Any, name: str) -> bool:
    """Whether the queue class of setting ``name`` is LIFO, from the names of its classes (every
    queue of Scrapy and queuelib says Lifo or Fifo); a class that says neither is FIFO, with a
    warning."""
    value = settings.get(name)
    try:
        queue_class = load_object(value) if isinstance(value, str) else value
        names = [each.__name__ for each in queue_class.__mro__]
    except (AttributeError, ImportError, NameError, ValueError):
        names = [str(value)]
    for each in names:
        if "Lifo" in each or "LIFO" in each:
            return True
        if "Fifo" in each or "FIFO" in each:
            return False
    logger.warning("clustersync: cannot tell whether %s = %r is FIFO or LIFO (neither word is in "
                   "its class names); the job's queue serves those requests FIFO.", name, value)
    return False
