"""SettingsApplier: a node applies the job's shared settings while it crawls.

The node's Redis thread reads the shared settings when it joins (before the spider opens, so
the first request uses them) and again whenever their version moves (node/settings_reads.py);
it hands them over in its ``NodeView``. Each time the thread hands something over
(``RedisThread.listen``), this extension looks at the version and, once per new version:

- computes the values in force (settings_in_force.py: shared over the node's own, but ``-s``
  keys, which win; a bad shared value is refused, logged once, and the last good one stays);
- changes Scrapy's running components (live_components.py);
- updates ``spider.live_settings`` (a read-only mapping of every live key's value in force,
  the spider's declared keys included);
- records the applied version, and the shared keys its ``-s`` overrides, in the node record;
- sends ``signals.settings_changed`` (``changed=``, ``version=``).

Scrapy's components read some values again when the spider opens (AutoThrottle sets the
downloader's start delay then), so what is in force is applied once more at ``spider_opened``.
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from scrapy import signals

from ..live_settings import masked
from .live_components import LiveComponents
from .settings_in_force import (
    InForce,
    declared_live_keys,
    local_values,
    overridden_keys,
)
from .signals import node_opened, settings_changed

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from ..store.shared_settings import SharedSettings
    from .cluster_scheduler import ClusterScheduler

logger = logging.getLogger(__name__)

#: the spider attribute that holds the values in force
SPIDER_ATTR = "live_settings"


class SettingsApplier:
    """Applies each new version of the shared settings to this node (see the module doc)."""

    def __init__(self, crawler: Crawler, components: LiveComponents | None = None) -> None:
        self.crawler = crawler
        self.components = components or LiveComponents(crawler)
        self.declared = declared_live_keys(crawler.spidercls)
        self.local = local_values(crawler.settings, self.declared)
        self.overridden = overridden_keys(crawler.settings, self.declared)
        self.node: ClusterScheduler | None = None
        #: the values in force now (None: no shared settings applied yet)
        self.in_force: InForce | None = None
        #: the version applied (None: none yet)
        self.version: int | None = None
        self._refused_logged: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        crawler.signals.connect(ext.node_opened, signal=node_opened)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        return ext

    def node_opened(self, scheduler: ClusterScheduler) -> None:
        self.node = scheduler
        self._publish_values(self.local)
        if scheduler.io is not None:
            scheduler.io.listen(self.check)
        self.check()

    def spider_opened(self) -> None:
        """Apply what is in force again: some components reset their values at open."""
        if self.in_force is not None:
            values = self.in_force.values
            self.components.apply(values, [k for k in values if values[k] != self.local[k]])

    def check(self) -> None:
        """Apply the shared settings the node read, if their version is new to it."""
        node = self.node
        shared = node.io.shared_settings if node is not None and node.io is not None else None
        if shared is None or shared.version == self.version:
            return
        self.apply(shared)

    def apply(self, shared: SharedSettings) -> dict[str, Any]:
        """Apply ``shared`` as a whole; returns the ``changed`` it signalled."""
        before = self.in_force
        base = before.values if before is not None else self.local
        now = InForce.of(shared, self.local, base, self.declared, self.overridden)
        changed = now.changes_from(before)
        self.components.apply(now.values, [k for k in now.values if now.values[k] != base[k]])
        self.in_force, self.version = now, shared.version
        self._log(shared.version, now, changed)
        self._publish_values(now.values)
        self._record(shared.version, sorted(set(shared.values) & self.overridden))
        self.crawler.signals.send_catch_log(settings_changed, changed=changed,
                                            version=shared.version)
        return changed

    def _publish_values(self, values: Any) -> None:
        spider = self.crawler.spider
        if spider is not None:
            setattr(spider, SPIDER_ATTR, MappingProxyType(dict(values)))

    def _record(self, version: int, overrides: list[str]) -> None:
        info = getattr(self.node, "node_info", None)
        if info is not None:
            info.settings_applied(version, overrides)

    def _log(self, version: int, now: InForce, changed: dict[str, Any]) -> None:
        for key, message in now.refused.items():
            if self._refused_logged.get(key) != message:
                self._refused_logged[key] = message
                logger.error("clustersync: the shared setting %s is not applied: %s; this node "
                             "keeps %r", key, message, masked(key, now.values[key]))
        if changed:
            shown = {key: masked(key, value) for key, value in changed.items()}
            logger.info("clustersync: shared settings version %d applied: %s", version, shown)
