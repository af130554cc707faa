"""What a node checks when it joins its job: a Redis the delivery guarantee does not hold on,
and its own dedup settings against the job's."""

from __future__ import annotations

import logging

from .config import ClusterConfig, redact_url
from .store import JobStore, StoreError

logger = logging.getLogger(__name__)

MIN_REDIS_VERSION = (7, 0)


def warn_of_risks(store: JobStore, config: ClusterConfig) -> None:
    """Log a warning for each way this Redis or this node's settings could hurt the crawl.

    Never raises: the node has joined; these are worth a warning, not a stop.
    """
    if store.dedup != config.dedup:
        logger.warning(
            "clustersync: job %r was created with dedup settings %s; this node's settings "
            "(%s) are ignored so that every node records fingerprints the same way.",
            config.job, store.dedup, config.dedup,
        )
    try:
        version, policy = store.server_facts()
    except StoreError:
        return
    url = redact_url(config.redis_url)
    if version and version < MIN_REDIS_VERSION:
        logger.warning(
            "clustersync: Redis at %s is version %s; clustersync needs %s or newer and is "
            "not tested on older versions.", url, ".".join(map(str, version)),
            ".".join(map(str, MIN_REDIS_VERSION)),
        )
    if policy and policy != "noeviction":
        logger.warning(
            "clustersync: Redis at %s evicts keys when full (maxmemory-policy %s): it may "
            "delete the job's queue or record, which loses requests. Use a Redis with "
            "maxmemory-policy noeviction for crawls.", url, policy,
        )
