"""``GET /metrics``: Prometheus metrics read from Redis at scrape time (a custom collector, no
state in serve), per job, per node and for the busiest sites.

Label sets are bounded: at most MAX_JOBS jobs, the nodes of the run under way (and dead ones
of it) up to MAX_NODES per job, the TOP_SITES deepest sites of each job's queue and the rest
summed as site="other". Each job costs two pipelines (its status and its frontier), whatever
its size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..cli.check_commands import needs_a_person
from ..cli.node_view import group_nodes
from ..cli.status_view import pages_per_min, state_of
from ..store import JobStatus, JobStore, StoreError, StoreUnavailable
from ..store.cluster_client import memory_info
from ..store.errors import translate_errors
from ..store.job_list import round_trip_s
from ..store.partition_reads import job_frontier

if TYPE_CHECKING:
    import redis

MAX_JOBS = 50
MAX_NODES = 200
TOP_SITES = 10
PAGES = "response_received_count"
ITEMS = "item_scraped_count"
ERROR_STATS = ("spider_exceptions/count", "downloader/exception_count")
STATES = ("running", "paused", "stopping", "stopped", "finished", "idle", "seeded",
          "waiting for nodes")


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"clustersync_{name}", doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(f"clustersync_{name}", doc, labels=labels)


class JobFamilies:
    """The per-job, per-node and per-site families of one scrape."""

    def __init__(self) -> None:
        job, node, site = ["job"], ["job", "node"], ["job", "site"]
        partition = ["job", "partition"]
        self.families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "pages": _counter("job_pages", "Responses received by the job's nodes", job),
            "items": _counter("job_items", "Items scraped by the job's nodes", job),
            "errors": _counter("job_errors", "Spider exceptions and download errors", job),
            "done": _counter("job_done", "Requests acked (done) over the job's life", job),
            "queued": _gauge("job_queued", "Requests queued (queue depth)", job),
            "leased": _gauge("job_leased", "Requests leased to nodes", job),
            "dead": _gauge("job_dead_letters", "Dead letters of the job", job),
            "failed": _counter("job_failed", "Requests that failed", job),
            "rate": _gauge("job_pages_per_minute", "Pages per minute of the live nodes", job),
            "live": _gauge("job_live_nodes", "Live nodes of the job", job),
            "state": _gauge("job_state", "1 for the job's state", ["job", "state"]),
            "attention": _gauge("job_needs_attention", "What needs a person (the lines of "
                                                       "status --check)", job),
            "node_up": _gauge("node_up", "1 if the node is alive", node),
            "node_pages": _counter("node_pages", "Responses received by the node", node),
            "node_items": _counter("node_items", "Items scraped by the node", node),
            "node_errors": _counter("node_errors", "The node's spider exceptions and download "
                                                   "errors", node),
            "node_leased": _gauge("node_leased", "Requests the node holds leased", node),
            "node_cpu": _gauge("node_cpu_percent", "The node process's CPU use, percent",
                               node),
            "node_rss": _gauge("node_memory_rss_bytes", "The node process's resident memory",
                               node),
            "partition_queued": _gauge("partition_queued", "Requests queued in each partition "
                                                           "of a job split into partitions",
                                       partition),
            "partition_leased": _gauge("partition_leased", "Requests leased from each "
                                                           "partition", partition),
            "partition_bytes": _gauge("partition_bytes", "Bytes of the requests queued in "
                                                         "each partition", partition),
            "site_queued": _gauge("site_queued", f"Requests queued per site: the "
                                                 f"{TOP_SITES} deepest, the rest as "
                                                 f"site=\"other\"", site),
        }

    def add(self, name: str, labels: list[str], value: float) -> None:
        self.families[name].add_metric(labels, value)

    def add_job(self, store: JobStore, report: JobStatus) -> None:
        job, stats = [report.job], report.scrapy_stats
        self.add("pages", job, stats.get(PAGES, 0))
        self.add("items", job, stats.get(ITEMS, 0))
        self.add("errors", job, sum(stats.get(name, 0) for name in ERROR_STATS))
        self.add("done", job, report.counters.get("acked", 0))
        self.add("failed", job, report.counters.get("failed", 0))
        self.add("queued", job, report.queued)
        self.add("leased", job, report.leased)
        self.add("dead", job, report.dead_letters)
        self.add("rate", job, pages_per_min(report))
        self.add("live", job, sum(1 for n in report.nodes if n["alive"]))
        self.add("attention", job, len(needs_a_person(store, report)))
        state = state_of(report)
        for each in STATES if state in STATES else (*STATES, state):
            self.add("state", [report.job, each], 1.0 if each == state else 0.0)
        if report.split:
            for part in report.partitions:
                where = [report.job, str(part.partition)]
                self.add("partition_queued", where, part.queued)
                self.add("partition_leased", where, part.leased)
                self.add("partition_bytes", where, part.bytes)
        for node in group_nodes(report).shown[:MAX_NODES]:
            self.add_node(report.job, node)
        self.add_sites(store, report)

    def add_node(self, job: str, node: dict[str, Any]) -> None:
        labels = [job, str(node["id"])]
        self.add("node_up", labels, 1.0 if node.get("alive") else 0.0)
        self.add("node_pages", labels, _number(node.get("pages")))
        self.add("node_items", labels, _number(node.get("items")))
        self.add("node_errors", labels, _number(node.get("errors")))
        self.add("node_leased", labels, _number(node.get("leased", node.get("inflight"))))
        self.add("node_cpu", labels, _number(node.get("cpu_percent")))
        self.add("node_rss", labels, _number(node.get("rss_bytes")))

    def add_sites(self, store: JobStore, report: JobStatus) -> None:
        frontier = job_frontier(store.client, store.keys, TOP_SITES, len(report.partitions))
        for site in frontier.deepest:
            self.add("site_queued", [report.job, site.site], site.queued)
        rest = frontier.queued - sum(site.queued for site in frontier.deepest)
        self.add("site_queued", [report.job, "other"], max(0, rest))


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


@dataclass
class ClusterReading:
    """What one read of the Redis found: the families /metrics answers with, and the store
    and status of each job they were made from (the alerts evaluate both: alert_engine.py).
    ``up`` is False when Redis failed during the read (``families`` then holds only
    clustersync_redis_up, 0)."""

    up: bool
    families: list[Metric]
    jobs: list[tuple[JobStore, JobStatus]] = field(default_factory=list)
    #: Redis's INFO memory: used_memory and maxmemory (0: no limit), bytes
    memory: dict[str, int] = field(default_factory=dict)


def redis_families() -> dict[str, GaugeMetricFamily]:
    """The families of the Redis itself, empty."""
    return {
        "up": _gauge("redis_up", "1 if Redis answered this scrape", []),
        "rtt": _gauge("redis_round_trip_seconds", "One PING to Redis, as serve measured it",
                      []),
        "used": _gauge("redis_used_memory_bytes",
                       "Memory Redis uses (INFO used_memory; a cluster: its fullest primary's)",
                       []),
        "max": _gauge("redis_maxmemory_bytes", "Redis's maxmemory (0: no limit)", []),
    }


def sample_names() -> set[str]:
    """Every sample name /metrics may answer with (a counter's with its ``_total``)."""
    families = [*redis_families().values(), *JobFamilies().families.values()]
    return {f.name + "_total" if isinstance(f, CounterMetricFamily) else f.name
            for f in families}


class ClusterCollector(Collector):
    """Reads the jobs of one Redis at every scrape (see the module doc)."""

    def __init__(self, client: redis.Redis, job_names: Callable[[], list[str]]) -> None:
        """``job_names``: the jobs on that Redis (ApiContext.job_names)."""
        self.client = client
        self.job_names = job_names

    def collect(self) -> Iterator[Metric]:
        yield from self.read().families

    def read(self) -> ClusterReading:
        """One read of the Redis: its figures, and every job's (at most MAX_JOBS)."""
        redis_side = redis_families()
        try:
            redis_side["rtt"].add_metric([], round_trip_s(self.client))
            memory = self._memory()
            families, jobs = self._jobs()
        except StoreError:
            redis_side["up"].add_metric([], 0.0)
            return ClusterReading(False, [redis_side["up"]])
        redis_side["up"].add_metric([], 1.0)
        redis_side["used"].add_metric([], memory["used_memory"])
        redis_side["max"].add_metric([], memory["maxmemory"])
        return ClusterReading(True, [*redis_side.values(), *families.families.values()], jobs,
                              memory)

    def _memory(self) -> dict[str, int]:
        """INFO memory's figures; zeros where the ACL refuses INFO."""
        try:
            with translate_errors(self.client):
                info = memory_info(self.client)
        except StoreUnavailable:
            raise
        except StoreError:
            info = {}
        return {name: int(info.get(name) or 0) for name in ("used_memory", "maxmemory")}

    def _jobs(self) -> tuple[JobFamilies, list[tuple[JobStore, JobStatus]]]:
        families, jobs = JobFamilies(), []
        for name in self.job_names()[:MAX_JOBS]:
            store = JobStore(self.client, name, node_id="cli", writes_seen=None)
            try:
                report = store.status()
            except StoreUnavailable:
                raise
            except StoreError:  # one job this version cannot read: leave it out
                continue
            if report.exists:
                families.add_job(store, report)
                jobs.append((store, report))
        return families, jobs
