"""Signals of this package, sent through the crawler's signal manager like Scrapy's own."""

from __future__ import annotations

#: Sent by ``ClusterScheduler.open`` once the node has joined its job and its Redis thread
#: runs, with ``scheduler=`` the node's ``ClusterScheduler``. The spider middleware and the
#: lifecycle extension learn the node this way (not through a module-level registry).
node_opened = object()
