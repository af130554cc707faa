"""The one message of the cluster CloseSpider extension to the node's Redis thread (beside
thread_messages.py's, in the same queue; closespider_part.py applies it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..store.closespider_script import CloseLimits, SpiderCounts


@dataclass(frozen=True)
class Counted:
    """The cluster CloseSpider extension's news (plugin/cluster_closespider.py): ``counts``
    since its last message, the ``limits`` it applies, the page tickets ``in_use`` (taken and
    not given back to the node's pool, so far) and whether a request ``waits`` for one."""

    counts: SpiderCounts
    limits: CloseLimits
    in_use: int = 0
    waits: bool = False
