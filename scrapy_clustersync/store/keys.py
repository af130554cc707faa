"""Every Redis key of a job, in one place.

All keys of a job share the hash tag ``{job}``, so every script of a job runs on one shard of a
Redis Cluster. Nothing else in the package builds a key name.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from ..config import MAX_PARTITIONS

PREFIX = "clustersync"
#: the field of partition 0's meta that holds the job's partition count (absent: 1)
PARTITIONS_FIELD = "partitions"


def parse_partitions(raw: bytes | str | None) -> int:
    """The partition count a meta's ``partitions`` field holds (None, absent: 1)."""
    if raw is None:
        return 1
    text = raw.decode() if isinstance(raw, bytes) else raw
    count = int(text) if text.isdigit() else 0
    if not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"a job's partition count must be 1..{MAX_PARTITIONS}, not {text!r}")
    return count


def partition_of(site: str, partitions: int) -> int:
    """The partition that holds ``site``'s requests, politeness budget and dedup record:
    ``crc32(site) mod partitions`` (docs/architecture.md, "Splitting a job into partitions").
    Stable across processes and versions (never Python's salted ``hash``)."""
    if partitions <= 1:
        return 0
    return zlib.crc32(site.encode("utf-8", "surrogatepass")) % partitions


@dataclass(frozen=True)
class JobKeys:
    """Key names of one job.

    - ``meta``     hash: epoch (detects a Redis that lost its data), seq, start claim, start_done
    - ``f:...``    the frontier: the queued requests, one list per site and queue class, and what
      leases them fairly (lua/frontier.lua documents every key: ``f:q:<kind>:<priority>:<site>``
      lists, ``f:ready:<kind>:<priority>``, ``f:rest:<kind>:<priority>``, ``f:classes`` and
      ``f:sites`` sorted sets, ``f:requeued`` hash; ``meta`` holds ``fqueued``, ``fbytes`` and
      ``fturn``)
    - ``queue``    sorted set: the legacy queue, what a job queued by an earlier version still
      holds (and entries put back with no site known): entry id, score = -priority; equal scores
      sort by id, i.e. FIFO; served before the frontier
    - ``entries``  hash: entry id -> encoded request, for leased entries and the legacy queue's
    - ``deadlines`` sorted set: leased entry id -> lease deadline (Redis server time, ms)
    - ``leased``   hash: leased entry id -> "<queue score>|<node id>" (records.LeaseValue)
    - ``node_leases`` sorted set: leased entry id -> its node's number * 2^32 + the node's lease
      sequence: each node's leases as one score range, in the order it leased them (the index
      lua/lease_index.lua keeps; a dead node's leases come back from it)
    - ``node_numbers`` hash: node id -> its number * 2^32 + its last lease sequence, while the
      node may lease (gone when it leaves or is declared dead); ``meta`` also holds
      ``node_numbered`` (the numbers given) and ``lease_sweep`` (the sweep of leases with no
      index entry: its HSCAN cursor, "done" once over)
    - ``reclaiming`` sorted set: "<number>:<node id>" -> number, the dead nodes whose leases are
      still going back to the queue, a bounded slice per heartbeat and lease call
    - ``seen``     set: raw 20-byte request fingerprints (exact dedup; a Bloom job's first ones
      until they move into the filter, see store/dedup.py)
    - ``stats``    hash: job counters (pushed, filtered, leased, acked, reclaimed, dead)
    - ``nodes``    sorted set: node id -> liveness deadline (server time, ms)
    - ``node_info`` hash: node id -> JSON record (host, pid, state, figures; see
      records.format_node_record)
    - ``idle``     hash: node id -> server ms since which the node is idle
    - ``dead_nodes`` hash: node id -> JSON record of its death, written by the heartbeat that
      declared it dead (heartbeat.lua: declared_ms, by, deadline_ms, leases_returned, record);
      the field goes when the node comes back
    - ``bloom``    hash: Bloom filter state (active layers, entries and layout per layer, the
      layout as records.BloomLayout writes it, and ``prepared<layer>``: how many chunks of a
      layer exist, allocated ahead of need)
    - ``bloom:<layer>:<chunk>`` string: the bits of one chunk of a Bloom layer
    - ``dead``     list: dead letters, newest first (records.DeadLetter): plain text, not
      msgpack: "<entry id>\t<node>\t<server ms>\t<reason>", a newline, then the entry's encoded
      request; for a refused write "-" as the id, then what was refused (write_ops.dead_letter_for)
    - ``meta`` also holds ``control`` (running, paused, stopping, stopped; absent = running) and
      ``control_ms``, written by control.lua; ``control`` is also the name of the job's pub/sub
      channel (``control_channel``), which is not a key
    - ``failed``   list: the newest failed requests, a JSON object each (lua/tasks.lua;
      store/task_records.py FailedRequest), at most ``CLUSTERSYNC_FAILED_KEEP``
    - ``tasks``    hash: the user's task id -> its record, a JSON object (lua/tasks.lua;
      store/task_records.py TaskRecord)
    - ``task_of``  hash: entry id -> task id, while an entry of a task is queued or leased
    - ``scrapy_stats`` hash: the nodes' Scrapy stats (pages, items, errors, responses by
      status, retries, bytes: plugin/stats_sender.py SUMMED), summed over every node of the job
    - ``node_stats`` hash: "<node id>\t<stat>" -> the same, per node
    - ``node_seen`` sorted set: node id -> server ms of its last heartbeat (heartbeat.lua), for
      every node with a record: how long a silent node has been silent, which run a node was
      of, and when a node that left or died is old enough to be pruned
    - ``pruned``   hash: what the job keeps of the nodes pruned after CLUSTERSYNC_NODE_RETENTION
      (prelude.lua ``prune_nodes``): nodes, closed, dead (how many) and "stat\t<name>" (their
      summed node stats)
    - ``meta`` also holds, for nodes that reach Redis through Sentinel (lua/primary.lua):
      ``primary`` (host:port of the primary they reach), ``primary_before``,
      ``primary_changes`` (how many times it changed: failovers) and ``primary_changed_ms``
    - ``meta`` also holds the job's run (prelude.lua ``start_run``): ``run`` (its number),
      ``run_started_ms`` and ``run_base`` (JSON: the job's figures when the run started)
    - ``settings`` hash: the job's shared settings, setting name -> canonical JSON of its value
      (lua/settings.lua; store/shared_settings.py); ``meta`` also holds ``settings_version``
      (absent = 0, one more per change) and ``settings_call`` (the last change's call id and
      reply); a change is published on ``control_channel`` as "settings <version>"
    - ``settings_log`` list: one JSON record per changed setting, oldest first ({"version",
      "ms", "who", "key", "old", "new"}), the newest ``CLUSTERSYNC_SETTINGS_HISTORY`` of them
    - ``live_keys`` hash: a key the spider declares live -> its type name ("str", "int",
      "float", "bool", "list", "dict"), written by the nodes
    - ``site:<site>`` hash: one site's politeness budget for the cluster (lua/site_turns.lua):
      tat_ms (when its next turn may start, server ms), blocked_ms (a Retry-After), backoff_ms,
      delay_ms (the step in force), seq, last_ms; it expires when the site is idle
    - ``inflight:<site>`` sorted set: token -> lease deadline (server ms), the site's turns under
      way when CONCURRENT_REQUESTS_PER_DOMAIN caps it for the cluster; expires with the site
    - ``sites``    sorted set: site -> server ms of its last turn (``clustersync status --sites``)
    - ``closespider`` hash: the cluster's CLOSESPIDER_* counts (lua/closespider.lua):
      ``pages``, ``items``, ``errors``, ``pages_no_item``, ``started_ms``, ``last_item_ms``,
      ``tickets`` (page tickets out), ``stop_reason`` and "call:<node>" (that node's last call
      id); ``meta`` also holds ``stop_reason`` (the close reason a limit stopped the job with;
      a resume removes it)
    - ``results`` stream: one entry per result (an item, an error record, a raw page), XADD
      with auto ids, appended by flush.lua with the ack of the request that produced it
      (results/record_format.py: fields ``v``, ``k``, ``id``, ``d``); readers are consumer
      groups on it
    - ``results_meta`` hash: ``cap`` (entries the stream may hold), ``written`` (results
      appended), ``refused_full`` (write calls refused at the cap), ``full_since_ms`` (server
      ms since which the stream is full; absent when it is not)
    - ``results_ids`` set: "<run>\t<result id>" of the results written without a lease (items
      start() yielded, those of requests kept on their node), so start() run again in the same
      run (a take-over, a rollback) appends none of them twice
    - ``call:<node>`` hash: the node's write counter (``writes``, see flush.lua) and its last
      flush and lease call ids with their results (a retried call changes nothing more)
    """

    job: str
    #: which partition of the job these keys are (0: the job of one partition, today's keys;
    #: job-wide state lives in partition 0 only)
    partition: int = 0
    #: the hash tag: ``JOB`` for partition 0, ``JOB/p`` for partition p (a job name never
    #: holds "/", so a partition's tag is never another job's)
    tag: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.partition < MAX_PARTITIONS:
            raise ValueError(f"partition {self.partition} out of 0..{MAX_PARTITIONS - 1}")
        object.__setattr__(self, "tag", self.job if self.partition == 0
                           else f"{self.job}/{self.partition}")

    def _key(self, name: str) -> str:
        return f"{PREFIX}:{{{self.tag}}}:{name}"

    def of_partition(self, partition: int) -> JobKeys:
        """The keys of partition ``partition`` of the same job."""
        return JobKeys(self.job, partition)

    def partitions(self, count: int) -> list[JobKeys]:
        """The keys of each of the job's ``count`` partitions, partition 0 first."""
        return [self.of_partition(p) for p in range(max(1, count))]

    @property
    def meta(self) -> str:
        return self._key("meta")

    @property
    def queue(self) -> str:
        return self._key("queue")

    @property
    def entries(self) -> str:
        return self._key("entries")

    @property
    def deadlines(self) -> str:
        return self._key("deadlines")

    @property
    def leased(self) -> str:
        return self._key("leased")

    @property
    def node_leases(self) -> str:
        return self._key("node_leases")

    @property
    def node_numbers(self) -> str:
        return self._key("node_numbers")

    @property
    def reclaiming(self) -> str:
        return self._key("reclaiming")

    @property
    def seen(self) -> str:
        return self._key("seen")

    @property
    def stats(self) -> str:
        return self._key("stats")

    @property
    def nodes(self) -> str:
        return self._key("nodes")

    @property
    def node_info(self) -> str:
        return self._key("node_info")

    @property
    def idle(self) -> str:
        return self._key("idle")

    @property
    def dead_nodes(self) -> str:
        return self._key("dead_nodes")

    @property
    def dead(self) -> str:
        return self._key("dead")

    @property
    def failed(self) -> str:
        return self._key("failed")

    @property
    def tasks(self) -> str:
        return self._key("tasks")

    @property
    def task_of(self) -> str:
        return self._key("task_of")

    @property
    def scrapy_stats(self) -> str:
        return self._key("scrapy_stats")

    @property
    def node_stats(self) -> str:
        return self._key("node_stats")

    @property
    def node_seen(self) -> str:
        return self._key("node_seen")

    @property
    def pruned(self) -> str:
        return self._key("pruned")

    @property
    def settings(self) -> str:
        return self._key("settings")

    @property
    def settings_log(self) -> str:
        return self._key("settings_log")

    @property
    def live_keys(self) -> str:
        return self._key("live_keys")

    @property
    def bloom(self) -> str:
        return self._key("bloom")

    def bloom_chunk(self, layer: int, chunk: int) -> str:
        """One string of a Bloom filter layer (layers are cut into chunks, see bloom_layout.py)."""
        return self._key(f"bloom:{layer}:{chunk}")

    def site(self, site: str) -> str:
        """One site's politeness budget (``site`` is its Scrapy download slot key)."""
        return self._key(f"site:{site}")

    @property
    def site_prefix(self) -> str:
        """Not a key: what every ``site(...)`` key starts with (lease.lua names them from it)."""
        return self._key("site:")

    @property
    def frontier(self) -> str:
        """Not a key: what the frontier's keys start with (lua/frontier.lua names them from it)."""
        return self._key("f:")

    def frontier_list(self, kind: int, priority: int, site: str) -> str:
        """The queued requests of one site and queue class (lua/frontier.lua)."""
        return f"{self.frontier}q:{kind}:{priority}:{site}"

    def frontier_ready(self, kind: int, priority: int | str) -> str:
        """The sites with requests of one queue class, in turn order (lua/frontier.lua)."""
        return f"{self.frontier}ready:{kind}:{priority}"

    def frontier_rest(self, kind: int, priority: int | str) -> str:
        """The sites of one queue class whose pace let no lease hand out a request, each until
        when one may (lua/frontier.lua)."""
        return f"{self.frontier}rest:{kind}:{priority}"

    @property
    def frontier_sites(self) -> str:
        """Sorted set: site -> requests queued (lua/frontier.lua)."""
        return f"{self.frontier}sites"

    @property
    def frontier_classes(self) -> str:
        """Sorted set: queue class "<kind>:<priority>" -> order, best first (lua/frontier.lua)."""
        return f"{self.frontier}classes"

    @property
    def frontier_requeued(self) -> str:
        """Hash: entry id -> its state, for entries put back when their lease ended."""
        return f"{self.frontier}requeued"

    @property
    def frontier_regions(self) -> str:
        """Hash: site -> the region it is pinned to (lua/regions.lua; regions.py)."""
        return f"{self.frontier}regions"

    def site_inflight(self, site: str) -> str:
        """One site's turns under way, when the cluster caps its concurrency."""
        return self._key(f"inflight:{site}")

    @property
    def sites(self) -> str:
        return self._key("sites")

    @property
    def closespider(self) -> str:
        return self._key("closespider")

    @property
    def results(self) -> str:
        return self._key("results")

    @property
    def results_meta(self) -> str:
        return self._key("results_meta")

    @property
    def results_ids(self) -> str:
        return self._key("results_ids")

    def last_call(self, node: str) -> str:
        """The node's last script call id and result, so a retried call changes nothing more."""
        return self._key(f"call:{node}")

    @property
    def control_channel(self) -> str:
        """Not a key: the pub/sub channel on which ``control.lua`` announces a pause, resume or
        stop, and ``settings.lua`` a new version of the shared settings (named with the job's
        hash tag, like its keys)."""
        return self._key("control")

    def shared_keys(self) -> list[str]:
        """Every key of the job that is not per node (what ``purge`` deletes besides those)."""
        return [
            self.meta, self.queue, self.entries, self.deadlines, self.leased,
            self.seen, self.stats, self.nodes, self.node_info, self.idle, self.dead, self.bloom,
            self.failed, self.tasks, self.task_of, self.scrapy_stats, self.node_stats,
            self.dead_nodes, self.node_seen, self.pruned, self.settings, self.settings_log,
            self.live_keys, self.sites, self.closespider, self.results, self.results_meta,
            self.results_ids, self.node_leases, self.node_numbers, self.reclaiming,
        ]



# Keys of the whole Redis, not of one job (``clustersync serve``; docs/architecture.md "Keys of
# the cluster", which tests/unit/test_api_keys.py keeps equal to these functions): no job's
# hash tag, each a key of its own.


def api_tokens_key() -> str:
    """The HTTP API's tokens (``clustersync token``): a hash, token name -> JSON record
    {role, sha256 (hex digest of the secret), created_ms, by} (store/api_tokens.py)."""
    return f"{PREFIX}:api:tokens"


def api_audit_key() -> str:
    """The writes made through the HTTP API and who made them: a list of JSON records
    {ms, who, action, job, detail}, newest first, bounded (store/api_tokens.py)."""
    return f"{PREFIX}:api:audit"


def api_alerts_key() -> str:
    """The alerts firing now (``clustersync serve --alerts``): a hash, alert id (the rule and
    its labels) -> JSON record {rule, job, node, labels, value, detail, since_ms}. A field is
    made with HSETNX and removed with HDEL, so that of several serve processes exactly one
    sends each firing and each resolving (api/alert_engine.py)."""
    return f"{PREFIX}:api:alerts"


def api_alert_log_key() -> str:
    """The newest alert transitions, newest first, bounded: a list of JSON records, the
    webhook's body (store/alert_state.py)."""
    return f"{PREFIX}:api:alert_log"


#: every function above, for the doc's test
CLUSTER_KEY_FUNCTIONS = (api_tokens_key, api_audit_key, api_alerts_key, api_alert_log_key)
