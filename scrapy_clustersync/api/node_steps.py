"""The JSON steps of an HTTP worker (node_routes.py): join, lease, flush, heartbeat, leave, each
one call of the job's JobStore as node ``node``, so one script run, with the worker's call id.

A worker's store is kept between its calls (its dedup settings are the job's, read at its first
call). It makes no rollback check (``writes_seen`` None): a worker of this form does not learn
that Redis came back older; the Scrapy node over HTTP (``calls``) does, as on Redis.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from ..cli.seed_urls import SeedEncoder
from ..regions import REGION
from ..store import JobStore
from ..store.errors import BadBatch, ResultsFull, RolledBack, StateLost, StoreError
from ..store.job_store import beat_of
from ..store.script_results import LeaseBatch
from ..store.write_ops import Ack, Failed, Op, Release, _url_of
from .api_context import ApiContext
from .api_errors import ApiError

#: the stores of the workers last heard from, kept
STORES_KEPT = 256
T = TypeVar("T")


class JoinBody(BaseModel):
    """POST join."""

    #: the worker is declared dead (its leases back in the queue) after this long unheard
    ttl_ms: int = Field(30_000, ge=1000, le=3_600_000)


class LeaseBody(BaseModel):
    """POST lease: ``call_id`` new for each lease (the same one again: the same answer)."""

    epoch: str
    call_id: str = Field(min_length=1, max_length=64)
    count: int = Field(10, ge=1, le=1000)
    lease_ms: int = Field(60_000, ge=1000, le=3_600_000)
    #: the worker's region ("" for none): the sites pinned to it and to none come first
    region: str = Field("", pattern=rf"^({REGION})?$")
    #: the worker has nothing else to do: the sites of other regions may come too
    foreign: bool = True


class PushBody(BaseModel):
    """A URL found, queued unless the job saw it."""

    url: str
    priority: int = 0


class FailedBody(BaseModel):
    """A leased request that failed: acked, and recorded in the failed requests."""

    id: str
    url: str = ""
    status: int = 0
    error: str = ""


class FlushBody(BaseModel):
    """POST flush: applied in one step, once per ``call_id``."""

    epoch: str
    call_id: str = Field(min_length=1, max_length=64)
    push: list[PushBody] = Field(default_factory=list, max_length=5000)
    ack: list[str] = Field(default_factory=list, max_length=5000)
    failed: list[FailedBody] = Field(default_factory=list, max_length=5000)
    release: list[str] = Field(default_factory=list, max_length=5000)


class HeartbeatBody(BaseModel):
    """POST heartbeat (and leave): ``lease_ids`` are renewed for ``lease_ms``."""

    epoch: str
    ttl_ms: int = Field(30_000, ge=1000, le=3_600_000)
    lease_ms: int = Field(60_000, ge=1000, le=3_600_000)
    lease_ids: list[str] = Field(default_factory=list, max_length=100_000)
    idle: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class NodeSteps:
    """One worker's store and its steps (see the module doc)."""

    _kept: OrderedDict[tuple[int, str, str], NodeSteps] = OrderedDict()
    _kept_lock = threading.Lock()

    def __init__(self, api: ApiContext, job: str, node: str) -> None:
        self.api = api
        self.store = JobStore(api.client, job, node, api.project.dedup(), writes_seen=None)
        self._lock = threading.Lock()
        self._adopted = False

    @classmethod
    def of(cls, api: ApiContext, job: str, node: str) -> NodeSteps:
        key = (id(api), job, node)
        with cls._kept_lock:
            steps = cls._kept.get(key)
            if steps is None:
                steps = cls._kept[key] = cls(api, job, node)
                while len(cls._kept) > STORES_KEPT:
                    cls._kept.popitem(last=False)
            cls._kept.move_to_end(key)
            return steps

    def _run(self, call: Callable[[JobStore], T]) -> T:
        with self._lock:
            try:
                if not self._adopted:  # the job's dedup settings (a join as "not a node")
                    self.store.join_node(ttl_ms=0, claim=False, recrawl="join")
                    self._adopted = True
                return call(self.store)
            except StateLost as exc:
                raise ApiError(410, f"state_lost: {exc}") from None
            except RolledBack as exc:
                raise ApiError(409, f"rolled_back: {exc}") from None
            except BadBatch as exc:
                raise ApiError(422, f"bad_batch: {exc}") from None
            except ResultsFull as exc:
                raise ApiError(429, f"results_full: {exc}") from None
            except StoreError:
                raise  # 503 (Redis away) or 500, api_errors.py

    def join(self, body: JoinBody) -> dict[str, Any]:
        joined = self._run(lambda s: s.join_node(body.ttl_ms, claim=False, recrawl="join"))
        return {"epoch": joined.epoch, "dedup": self.store.dedup.mode}

    def lease(self, body: LeaseBody) -> dict[str, Any]:
        def leased(store: JobStore) -> LeaseBatch:
            store.set_region(body.region)  # (under the lock _run holds: this call's region)
            return store.lease(body.epoch, body.count, body.lease_ms, body.call_id,
                               foreign=body.foreign)

        batch = self._run(leased)
        return {"entries": [{"id": e.entry_id, "url": _url_of(e.blob), "priority": e.priority,
                             "request": base64.b64encode(e.blob).decode()} for e in batch],
                "retry_s": batch.retry_s}

    def flush(self, body: FlushBody) -> dict[str, Any]:
        ops: list[Op] = []
        for priority in sorted({p.priority for p in body.push}, reverse=True):
            urls = [p.url for p in body.push if p.priority == priority]
            ops.extend(SeedEncoder(self.api.fingerprinter(), priority, None).ops_for(urls))
        ops.extend(Ack(entry) for entry in body.ack)
        ops.extend(Failed(f.id, f.url, f.status, f.error or f"HTTP {f.status}", 1, False)
                   for f in body.failed)
        ops.extend(Release(entry) for entry in body.release)
        result = self._run(lambda s: s.flush(body.epoch, ops, body.call_id))
        return {"pushed": result.pushed, "filtered": result.filtered, "acked": result.acked,
                "released": result.released, "dead": result.dead}

    def heartbeat(self, body: HeartbeatBody, leaving: bool = False) -> dict[str, Any]:
        beat = beat_of(ttl_ms=0 if leaving else body.ttl_ms, lease_ms=body.lease_ms,
                       info=body.info, idle=body.idle, idle_after_ms=0,
                       lease_ids=body.lease_ids)

        def send(store: JobStore) -> tuple[Any, Any]:
            return store._count_beat(body.epoch, beat), store.control_state()

        beaten, control = self._run(send)
        return {"finished": beaten.finished, "queued": beaten.queued, "leased": beaten.leased,
                "live_nodes": beaten.live_nodes, "done": beaten.done, "control": control.state,
                "settings_version": control.settings_version,
                "declared_dead": [{"node": d.node, "leases": d.leases} for d in
                                  beaten.declared_dead]}
