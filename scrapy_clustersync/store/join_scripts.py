"""``join.lua`` and ``restart.lua``: a node (or the CLI) joins the job, creating it if new; a
finished job is made crawlable again, its seen record kept or forgotten in the same step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from ..config import DedupSettings
from .dedup import bloom_chunks_of, check_job_mode, setting_of
from .errors import translate_errors
from .keys import JobKeys
from .records import as_text
from .script_base import JobScript
from .script_results import FinishedRun, Joined, Restarted

#: the answer of a script that found the bloom hash changed since it was read (nothing done)
RETRY = "retry"
#: join.lua's answer to "forget-seen" on a finished job that live nodes still hold open
HELD = "held"


@dataclass(frozen=True)
class DedupRecord:
    """The keys of the job's dedup record (exact set, bloom hash, the Bloom chunks the hash
    names) and the bloom hash as read (field, value pairs), which the script checks unchanged
    before it deletes the record (prelude.lua ``dedup_unchanged``)."""

    keys: tuple[str, ...] = ()
    bloom_fields: tuple[str, ...] = ()

    @classmethod
    def read(cls, client: redis.Redis, keys: JobKeys) -> DedupRecord:
        with translate_errors(client):
            bloom = {as_text(name): as_text(value)
                     for name, value in client.hgetall(keys.bloom).items()}
        names = [keys.seen, keys.bloom]
        for name, value in bloom.items():
            names.extend(bloom_chunks_of(keys, name, value))
        return cls(tuple(names), tuple(x for pair in bloom.items() for x in pair))


@dataclass(frozen=True)
class JoinRequest:
    """What a join asks (join.lua's header): the node, the epoch a new job gets, how long the
    node stays alive (0: not a node), whether it claims start(), the dedup settings a new job
    stores (``dedup_mode`` as dedup.job_mode_for gives it), and ``recrawl``."""

    node: str
    new_epoch: str
    ttl_ms: int
    claim: bool
    dedup_mode: str
    dedup: DedupSettings
    recrawl: str


def run_keys(k: JobKeys) -> list[str]:
    """The fixed KEYS of join.lua and restart.lua: what a join reads and what a run starts from
    (prelude.lua ``start_run``)."""
    return [k.meta, k.nodes, k.queue, k.deadlines, k.stats, k.scrapy_stats, k.seen, k.bloom]


class JoinScript(JobScript):
    """join.lua: ``run`` answers what the join did and the dedup settings the job stores."""

    FILE = "join"
    KEYS = ("meta", "nodes", "queue", "deadlines", "stats", "scrapy_stats", "seen", "bloom")
    KEYS_TAIL = "dedup"
    ARGV = ("node", "new_epoch", "ttl_ms", "claim", "dedup_mode", "bloom_capacity",
            "bloom_error", "recrawl")
    ARGV_TAIL = "bloom_field"

    def call(self, ask: JoinRequest, record: DedupRecord) -> tuple[list[str], list[Any]]:
        k = self.keys
        keys = [*run_keys(k), *record.keys]
        args: list[Any] = [ask.node, ask.new_epoch, ask.ttl_ms, int(ask.claim), ask.dedup_mode,
                           ask.dedup.bloom_capacity, repr(ask.dedup.bloom_error_rate),
                           ask.recrawl, *record.bloom_fields]
        return keys, args

    def run(self, ask: JoinRequest, record: DedupRecord) -> tuple[Joined, str, DedupSettings]:
        """What the join did (``Joined.restarted`` is RETRY if the bloom hash changed since
        ``record`` was read: nothing done), the job's stored dedup mode and its settings.

        Raises StoreError if the job stores a dedup mode this version does not read.
        """
        return self.parse(self._call(*self.call(ask, record)))

    def parse(self, reply: Any) -> tuple[Joined, str, DedupSettings]:
        """``run``'s answer from the script's reply (the same errors)."""
        epoch, claimed, mode, capacity, error, *finish, restarted = reply
        job_mode = as_text(mode)
        check_job_mode(self.keys.job, job_mode)
        settings = DedupSettings(setting_of(job_mode), int(capacity), float(as_text(error)))
        finished = None
        if as_text(finish[0]):
            finished = FinishedRun(*(int(as_text(x) or 0) for x in finish))
        return Joined(as_text(epoch), bool(int(claimed)), finished, as_text(restarted)), \
            job_mode, settings


class RestartScript(JobScript):
    """restart.lua: ``run`` restarts the job, or says why not."""

    FILE = "restart"
    KEYS = ("meta", "nodes", "queue", "deadlines", "stats", "scrapy_stats", "seen", "bloom")
    KEYS_TAIL = "dedup"
    ARGV = ("force", "forget")
    ARGV_TAIL = "bloom_field"

    def call(self, force: bool, record: DedupRecord | None) -> tuple[list[str], list[Any]]:
        """``record``: the dedup record to forget, None to keep it."""
        k, forget = self.keys, record is not None
        record = record or DedupRecord()
        return ([*run_keys(k), *record.keys],
                [int(force), int(forget), *record.bloom_fields])

    def run(self, force: bool, record: DedupRecord | None) -> Restarted | None:
        """What the restart did; None if the bloom hash changed since ``record`` was read
        (nothing done: read it again and retry)."""
        reply = self._call(*self.call(force, record))
        done, live, queued, leased = (int(x) for x in reply[:4])
        resumed = as_text(reply[4]) if len(reply) > 4 else ""
        return None if done < 0 else Restarted(bool(done), live, queued, leased, resumed)
