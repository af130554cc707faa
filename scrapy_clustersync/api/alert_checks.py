"""The checks an alert rule may name (``check = "..."``): what /metrics has no one series for,
made from the same read of the Redis as /metrics (metrics.ClusterReading), with no read of
their own (but ``consistency``, whose findings the scheduled check leaves in ``findings``).

Each check gives samples: labels (``job``, and ``node`` for a node's), a value and a detail
line saying what was seen, which the alert carries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..cli.node_view import group_nodes
from ..cli.status_view import pages_per_min, state_of
from ..store.consistency import Finding
from ..store.node_differences import node_differences
from ..store.shared_settings import SharedSettingsStore
from .metrics import ClusterReading

#: states in which a job with work queued should be fetching pages
WORKING_STATES = ("running", "waiting for nodes", "idle")
#: findings named in a detail line at most
FINDINGS_NAMED = 3


@dataclass(frozen=True)
class Sample:
    """One value of a check (or of a metric), with its labels and what it means."""

    labels: Mapping[str, str]
    value: float
    detail: str = ""


@dataclass
class CheckInput:
    """What the checks read: one read of the Redis, and the newest findings of the scheduled
    consistency check by job (absent: the check is off, or has not run yet)."""

    reading: ClusterReading
    findings: Mapping[str, list[Finding]] = field(default_factory=dict)


def node_dead(given: CheckInput) -> list[Sample]:
    """1 for each node of a job's run under way that is dead (declared so, its leases
    returned) or silent (no heartbeat, not declared yet), 0 for the others."""
    found = []
    for _store, report in given.reading.jobs:
        dead = {d.node: d for d in report.dead_nodes}
        for node in group_nodes(report).shown:
            node_id, state = str(node["id"]), str(node.get("state", ""))
            value = 1.0 if state in ("dead", "silent") else 0.0
            detail = f"node {node_id} is {state}"
            if node_id in dead:
                detail += f"; {dead[node_id].leases_returned} lease(s) went back to the queue"
            found.append(Sample({"job": report.job, "node": node_id}, value, detail))
    return found


def settings_differ(given: CheckInput) -> list[Sample]:
    """Per job, how many settings, files or versions differ between its live nodes (the
    digests of their records; store/node_differences.py), the settings it shares left out."""
    found = []
    for store, report in given.reading.jobs:
        live = {str(n["id"]): n for n in report.nodes if n["alive"]}
        if len(live) < 2:
            found.append(Sample({"job": report.job}, 0.0))
            continue
        shared = SharedSettingsStore(store.client, store.keys).names()
        differences = node_differences(live, shared)
        detail = "; ".join(d.line() for d in differences[:FINDINGS_NAMED])
        found.append(Sample({"job": report.job}, float(len(differences)), detail))
    return found


def job_stalled(given: CheckInput) -> list[Sample]:
    """Per job, 1 while requests are queued, the job is not paused or stopped, and no live
    node fetched a page in its last minute (give the rule a ``for`` of N minutes)."""
    found = []
    for _store, report in given.reading.jobs:
        state = state_of(report)
        stalled = (report.queued > 0 and state in WORKING_STATES
                   and pages_per_min(report) == 0)
        detail = (f"{report.queued:,} request(s) queued, {state}, no page fetched in the last "
                  "minute" if stalled else "")
        found.append(Sample({"job": report.job}, 1.0 if stalled else 0.0, detail))
    return found


def redis_memory(given: CheckInput) -> list[Sample]:
    """The share of Redis's maxmemory in use (0 to 1; 0 when Redis has no maxmemory)."""
    used, limit = (given.reading.memory.get(n, 0) for n in ("used_memory", "maxmemory"))
    share = used / limit if limit else 0.0
    detail = f"Redis uses {used / 2**20:,.0f} MiB of its maxmemory {limit / 2**20:,.0f} MiB"
    return [Sample({}, share, detail if limit else "")]


def consistency(given: CheckInput) -> list[Sample]:
    """Per job the scheduled consistency check looked at, how many findings it left (what
    ``clustersync check`` reports)."""
    found = []
    for job, findings in given.findings.items():
        named = "; ".join(f"{f.kind} {f.subject}: {f.detail}" for f in findings[:FINDINGS_NAMED])
        found.append(Sample({"job": job}, float(len(findings)), named))
    return found


CHECKS: dict[str, Callable[[CheckInput], list[Sample]]] = {
    "node_dead": node_dead,
    "settings_differ": settings_differ,
    "job_stalled": job_stalled,
    "redis_memory": redis_memory,
    "consistency": consistency,
}
