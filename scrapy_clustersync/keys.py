"""Every Redis key of a job, in one place.

All keys of a job share the hash tag ``{job}``, so every script of a job runs on one shard of a
Redis Cluster. Nothing else in the package builds a key name.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "clustersync"


@dataclass(frozen=True)
class JobKeys:
    """Key names of one job.

    - ``meta``     hash: epoch (detects a Redis that lost its data), seq, start claim, start_done
    - ``queue``    sorted set: entry id, score = -priority; equal scores sort by id, i.e. FIFO
    - ``entries``  hash: entry id -> encoded request
    - ``deadlines`` sorted set: leased entry id -> lease deadline (Redis server time, ms)
    - ``leased``   hash: leased entry id -> "<queue score>|<node id>" (formats.LeaseValue)
    - ``seen``     set: raw 20-byte request fingerprints (exact dedup; a Bloom job's first ones
      until they move into the filter, see store/dedup.py)
    - ``stats``    hash: job counters (pushed, filtered, leased, acked, reclaimed, dead)
    - ``nodes``    sorted set: node id -> liveness deadline (server time, ms)
    - ``node_info`` hash: node id -> JSON record (host, pid, state, figures; see
      formats.format_node_record)
    - ``idle``     hash: node id -> server ms since which the node is idle
    - ``dead_nodes`` hash: node id -> JSON record of its death, written by the heartbeat that
      declared it dead (heartbeat.lua: declared_ms, by, deadline_ms, leases_returned, record);
      the field goes when the node comes back
    - ``bloom``    hash: Bloom filter state (active layers, entries and layout per layer, the
      layout as formats.BloomLayout writes it, and ``prepared<layer>``: how many chunks of a
      layer exist, allocated ahead of need)
    - ``bloom:<layer>:<chunk>`` string: the bits of one chunk of a Bloom layer
    - ``dead``     list: dead letters, newest first (formats.DeadLetter): plain text, not
      msgpack: "<entry id>\t<node>\t<server ms>\t<reason>", a newline, then the entry's encoded
      request; for a refused write "-" as the id, then what was refused (ops.dead_letter_for)
    - ``call:<node>`` hash: the node's write counter (``writes``, see flush.lua) and its last
      flush and lease call ids with their results (a retried call changes nothing more)
    """

    job: str

    def _key(self, name: str) -> str:
        return f"{PREFIX}:{{{self.job}}}:{name}"

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
    def bloom(self) -> str:
        return self._key("bloom")

    def bloom_chunk(self, layer: int, chunk: int) -> str:
        """One string of a Bloom filter layer (layers are cut into chunks, see bloom.py)."""
        return self._key(f"bloom:{layer}:{chunk}")

    def last_call(self, node_id: str) -> str:
        """The node's last script call id and result, so a retried call changes nothing more."""
        return self._key(f"call:{node_id}")

    def shared_keys(self) -> list[str]:
        """Every key of the job that is not per node (what ``purge`` deletes besides those)."""
        return [
            self.meta, self.queue, self.entries, self.deadlines, self.leased,
            self.seen, self.stats, self.nodes, self.node_info, self.idle, self.dead, self.bloom,
            self.dead_nodes,
        ]
