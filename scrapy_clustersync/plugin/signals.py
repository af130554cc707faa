"""Signals of this package, sent through the crawler's signal manager like Scrapy's own."""

from __future__ import annotations

#: Sent by ``ClusterScheduler.open`` once the node has joined its job and its Redis thread
#: runs, with ``scheduler=`` the node's ``ClusterScheduler``. The spider middleware and the
#: lifecycle extension learn the node this way (not through a module-level registry).
node_opened = object()

#: Sent on the reactor when the node starts applying a new version of the job's shared settings
#: (``clustersync config set``/``unset``/``load``), with ``changed=`` a dict of the keys whose
#: value in force changed (a key unset is given as ``None``: its settings.py value is back) and
#: ``version=`` the shared-settings version now applied. Keys given with ``-s`` on this node's
#: command line keep their value and are not in ``changed``. Sent once per applied version,
#: also for the version read at start (before the first request), where ``changed`` is every
#: shared key this node applies.
settings_changed = object()
