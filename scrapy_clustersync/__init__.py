"""scrapy-clustersync: many ``scrapy crawl`` processes, one crash-safe crawl shared via Redis."""

from __future__ import annotations

from .plugin.addon import Addon

__all__ = ["Addon"]
__version__ = "0.2.0"
