"""``flush.lua``: one node's buffered writes applied in one atomic step, in order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .dedup import LayersDescribed
from .errors import BadBatch
from .keys import JobKeys
from .records import as_text
from .script_base import JobScript
from .script_results import FlushResult
from .write_ops import Op, PackedPushes, packed_strings

#: how many dead letters the job keeps, newest first
DEAD_LETTERS_KEPT = 10_000
#: the most entries the results stream holds unless told (CLUSTERSYNC_RESULTS_MAX)
RESULTS_MAX = 1_000_000


@dataclass(frozen=True)
class FlushDedup:
    """How a flush records fingerprints: the job's stored mode (store/dedup.py),
    how many the exact set takes before the filter does (0 for exact), and the layers described.
    """

    mode: str
    set_limit: int = 0
    layers: LayersDescribed = LayersDescribed()


class FlushScript(JobScript):
    """flush.lua for one node: ``run`` applies a batch; the same call id twice is a no-op."""

    FILE = "flush"
    HELPERS = ("bloom", "tasks", "frontier")
    KEYS = ("meta", "queue", "entries", "deadlines", "leased", "seen", "stats", "dead",
            "last_call", "bloom", "failed", "tasks", "task_of", "scrapy_stats", "node_stats",
            "frontier", "results", "results_meta", "results_ids", "node_leases")
    KEYS_TAIL = "chunk"
    ARGV = ("epoch", "call_id", "node", "dead_max", "dedup_mode", "writes_seen", "set_limit",
            "described", "failed_max", "results_max")
    ARGV_TAIL = "layout"  # then the ops, packed (packed_ops)

    def __init__(self, client: redis.Redis, keys: JobKeys, node_id: str,
                 failed_max: int, results_max: int = RESULTS_MAX) -> None:
        super().__init__(client, keys)
        self.node_id = node_id
        #: how many failed requests the job keeps (CLUSTERSYNC_FAILED_KEEP)
        self.failed_max = failed_max
        #: the most entries of the results stream (CLUSTERSYNC_RESULTS_MAX): a batch carrying
        #: results is refused (ResultsFull) while the stream holds that many
        self.results_max = results_max

    def call(self, epoch: str, call_id: str, writes_seen: int, dedup: FlushDedup,
             ops: Sequence[Op] | PackedPushes) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of the call: the fixed ones, the layers described, then each op's
        ``args()`` in order (``PackedPushes``: packed already)."""
        k, layers = self.keys, dedup.layers
        keys = [k.meta, k.queue, k.entries, k.deadlines, k.leased, k.seen, k.stats, k.dead,
                k.last_call(self.node_id), k.bloom, k.failed, k.tasks, k.task_of,
                k.scrapy_stats, k.node_stats, k.frontier, k.results, k.results_meta,
                k.results_ids, k.node_leases, *layers.chunk_keys]
        args: list[Any] = [epoch, call_id, self.node_id, DEAD_LETTERS_KEPT, dedup.mode,
                           writes_seen, dedup.set_limit, layers.count, self.failed_max,
                           self.results_max, *layers.layouts, packed_ops(ops)]
        return keys, args

    def run(self, epoch: str, call_id: str, writes_seen: int, dedup: FlushDedup,
            ops: Sequence[Op] | PackedPushes) -> tuple[FlushResult, int]:
        """What the batch did, and the node's write counter after it.

        Raises BadBatch, before any change, if an op is malformed or cannot be encoded;
        ResultsFull if the batch carries results and the results stream is full; the script's
        other refusals (errors.py, flush.lua's header) as the store's errors.
        """
        keys, args = self.encoded_call(epoch, call_id, writes_seen, dedup, ops)
        try:
            raw = self._call(keys, args)
        except UnicodeEncodeError as exc:  # redis-py encodes text when it sends: never sent
            raise BadBatch(f"a write cannot be encoded for Redis ({exc})") from None
        return self.parse(raw)

    def encoded_call(self, epoch: str, call_id: str, writes_seen: int, dedup: FlushDedup,
                     ops: Sequence[Op] | PackedPushes) -> tuple[list[str], list[Any]]:
        """``call``, raising BadBatch for an op that cannot be encoded."""
        try:
            return self.call(epoch, call_id, writes_seen, dedup, ops)
        except (TypeError, ValueError, OverflowError) as exc:
            raise BadBatch(f"a write cannot be encoded for Redis ({exc})") from None

    def parse(self, reply: Any) -> tuple[FlushResult, int]:
        """``run``'s answer from the script's reply."""
        *figures, writes = (int(x) for x in as_text(reply).split())
        return FlushResult(*figures), writes


def packed_ops(ops: Sequence[Op] | PackedPushes) -> bytes:
    """Every op's ``args()`` in one msgpack array, each value a string as redis-py would send
    it (an int as its digits): one argument for the whole batch, which costs redis-py and Redis
    a fraction of one argument per field (six per push). TypeError for a value Redis takes
    no string of (None, a bool, a list). ``PackedPushes`` are packed already."""
    if isinstance(ops, PackedPushes):
        return ops.packed
    flat: list[Any] = []
    for op in ops:
        flat.extend(op.args())
    return packed_strings([value if (kind := type(value)) is bytes or kind is str
                           else str(value) if kind is int else _as_text(value)
                           for value in flat])


def _as_text(value: object) -> str | bytes:
    if isinstance(value, (bytes, str)):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    raise TypeError(f"a {type(value).__name__} value cannot be sent to Redis")
