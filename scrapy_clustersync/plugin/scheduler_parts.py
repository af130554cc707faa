"""What a ``ClusterScheduler`` is built of, from a crawler's settings (its ``from_crawler``)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ..codec import RequestCodec
from ..config import DEFAULTS, ClusterConfig
from ..node.spool import Spool
from ..store import JobStore, make_client
from .cluster_dupefilter import ClusterDupeFilter, project_dupefilter
from .crawl_order import QueueOrder
from .crawler_parts import CrawlerFingerprinter

if TYPE_CHECKING:
    import redis
    from scrapy.crawler import Crawler

#: the job of a crawler whose spider has no name, unless CLUSTERSYNC_JOB says otherwise
DEFAULT_JOB = "default"


def node_client(config: ClusterConfig) -> redis.Redis:
    """The node's Redis client: redis-py's, or with CLUSTERSYNC_URL the one that reaches the
    job through ``clustersync serve`` (store/http_client.py; the same store on top)."""
    if not config.over_http:
        return make_client(config.redis_url, config.tls, config.socket_timeout_s)
    from ..store.http_client import http_client

    verify: bool | str = config.tls.ca_certs or config.tls.verify
    return http_client(config.redis_url, config.http_token, config.job, config.node_id,
                     timeout_s=config.socket_timeout_s, verify=verify)


def scheduler_parts(crawler: Crawler) -> dict[str, Any]:
    """The keyword arguments of ``ClusterScheduler`` (but ``crawler``) for ``crawler``: its
    config, store, codec, the cluster's dupefilter and the project's, the spool, the order."""
    assert crawler.stats is not None
    settings = crawler.settings
    # Scrapy cannot crawl a spider without a name, but its scheduler can be built for one
    # (a crawler of the base Spider): such a job is "default" unless CLUSTERSYNC_JOB says
    config = ClusterConfig.from_settings(
        settings, getattr(crawler.spidercls, "name", None) or DEFAULT_JOB)
    client = node_client(config)
    codec = RequestCodec(
        crawler.spider,  # None until the spider exists: open() sets it
        config.max_request_bytes,
        settings.getlist("CLUSTERSYNC_REQUEST_CLASSES"),
    )
    # the crawler's own fingerprinter, read when first needed: Scrapy sets it when the crawl
    # starts, and a scheduler may be built (and opened) for a crawler that never starts one
    dupefilter = ClusterDupeFilter(
        CrawlerFingerprinter(crawler), Counter(), config.local_seen_cache,
        debug=settings.getbool("DUPEFILTER_DEBUG"),
    )
    spool_dir = str(settings.get("CLUSTERSYNC_SPOOL_DIR") or DEFAULTS["CLUSTERSYNC_SPOOL_DIR"])
    return {
        "config": config,
        "store": JobStore(client, config.job, config.node_id, config.dedup,
                          failed_keep=config.failed_keep,
                          results_max=config.results.max_entries),
        "codec": codec,
        "dupefilter": dupefilter,
        "spool": Spool(spool_dir, config.job),
        "df": project_dupefilter(crawler, dupefilter),
        "order": QueueOrder.from_settings(settings),
    }
