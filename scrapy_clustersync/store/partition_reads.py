"""The frontier and the sites of a whole job, over each of its partitions (``clustersync status
--sites``, the HTTP API's sites and ``/metrics``): each partition's are read as for a job of
one partition (frontier_status.py, site_scripts.py), then merged; bounded like those, a few
round trips per partition."""

from __future__ import annotations

import redis

from .frontier_status import FrontierStatus, read_frontier
from .job_store import job_partitions
from .keys import JobKeys
from .site_scripts import SITES_SHOWN, SiteStatus, read_sites


def _partitions(client: redis.Redis, keys: JobKeys, count: int | None) -> list[JobKeys]:
    return keys.partitions(job_partitions(client, keys.job) if count is None else count)


def job_frontier(client: redis.Redis, keys: JobKeys, limit: int,
                 count: int | None = None) -> FrontierStatus:
    """The frontier of the job: the partitions' figures summed and their ``limit`` deepest
    sites (``count``: the job's partitions when known, else read)."""
    parts = [read_frontier(client, each, limit) for each in _partitions(client, keys, count)]
    if len(parts) == 1:
        return parts[0]
    deepest = sorted((site for part in parts for site in part.deepest),
                     key=lambda site: -site.queued)[:limit]
    return FrontierStatus(
        queued=sum(part.queued for part in parts), bytes=sum(part.bytes for part in parts),
        sites=sum(part.sites for part in parts), deepest=deepest,
        ready=sum(part.ready for part in parts), resting=sum(part.resting for part in parts))


def job_sites(client: redis.Redis, keys: JobKeys, limit: int = SITES_SHOWN,
              count: int | None = None) -> tuple[int, list[SiteStatus]]:
    """How many sites the job has in use, and the ``limit`` used last, newest first, over
    every partition (a site's budget is in its partition)."""
    parts = [read_sites(client, each, limit) for each in _partitions(client, keys, count)]
    if len(parts) == 1:
        return parts[0]
    shown = sorted((site for _, sites in parts for site in sites),
                   key=lambda site: site.idle_s)[:limit]
    return sum(total for total, _ in parts), shown
