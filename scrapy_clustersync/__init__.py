"""scrapy-clustersync: many ``scrapy crawl`` processes, one crash-safe crawl shared via Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plugin.addon import Addon

__all__ = ["Addon"]
__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    # the add-on (and the Scrapy and Twisted machinery under it) is imported when it is first
    # asked for, so that the ``clustersync`` command starts without it
    if name == "Addon":
        from .plugin.addon import Addon

        return Addon
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
