"""Helpers for the spiders the end-to-end tests write into a copy of the example project.

``project_with_spiders`` copies this file there as ``example/spiders/helpers.py``; the spiders
import ``sleep``, ``mark`` and ``wait_for`` from it.
"""

from __future__ import annotations

import os


async def sleep(seconds: float) -> None:
    """Sleep without blocking the reactor (the asyncio one or a plain Twisted one)."""
    from scrapy.utils.defer import maybe_deferred_to_future
    from twisted.internet import reactor  # the one Scrapy installed
    from twisted.internet.task import deferLater

    await maybe_deferred_to_future(deferLater(reactor, seconds, lambda: None))


async def wait_for(name: str) -> None:
    """Wait, without blocking the reactor, until the marks file ``name`` exists: a barrier the
    test opens (support.open_barrier) once it has seen what it waits for."""
    path = os.path.join(os.environ["MARKS_DIR"], name)
    while not os.path.exists(path):
        await sleep(0.02)


def mark(name: str, line: str) -> None:
    """Append ``line`` to the marks file ``name`` the test reads (see support.marks)."""
    with open(os.path.join(os.environ["MARKS_DIR"], name), "a") as marks:
        marks.write(line + "\n")
