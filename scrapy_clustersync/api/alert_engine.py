"""The alerts ``clustersync serve`` evaluates in the background (docs/api.md "Alerts").

Every ``every_s`` seconds a thread reads the Redis once, as /metrics does
(metrics.ClusterCollector.read), and evaluates each rule against the samples: a metric's series
or a check's (alert_checks.py). An alert is one rule and one set of labels; it fires once its
condition held for the rule's ``for`` without a break, and resolves once it no longer holds (or
its series is gone: a node of an earlier run). Each transition is claimed in Redis
(store/alert_state.py), so several serve processes send it once between them, and the process
that claimed it posts it to the webhook (webhook.py). With ``check_every_s`` > 0 it also runs
the consistency check of ``clustersync check`` on every job that often; the ``consistency``
check reads its findings.

What a process remembers (since when a condition holds, a metric's recent values for
``increase_over``) is its own: a process started later waits that long before it fires or
resolves such an alert.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..store import JobStore, StoreError
from ..store.alert_state import AlertStateStore, server_ms
from ..store.consistency import Finding, check_job
from .alert_checks import CHECKS, CheckInput, Sample
from .alert_rules import Rule, RuleSet
from .metrics import ClusterCollector, ClusterReading

if TYPE_CHECKING:
    import redis

    from .webhook import Webhook

log = logging.getLogger(__name__)
#: how often the rules are evaluated unless serve is told (--alert-every)
EVERY_S = 5.0


def alert_id(rule: Rule, labels: dict[str, str]) -> str:
    """The id of the alert of ``rule`` with ``labels``: the rule's name and the labels."""
    return f"{rule.name}{json.dumps(labels, sort_keys=True, separators=(',', ':'))}"


def metric_samples(reading: ClusterReading, name: str) -> list[Sample]:
    """The samples named ``name`` of one read (a counter's with its ``_total``)."""
    return [Sample(dict(s.labels), float(s.value)) for family in reading.families
            for s in family.samples if s.name == name]


def iso_ms(ms: int) -> str:
    """Server ms as ISO 8601 UTC, to the millisecond."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


class AlertEngine:
    """The rules of one serve process, their memory, and the thread evaluating them."""

    def __init__(self, client: redis.Redis, job_names: Callable[[], list[str]],
                 rules: RuleSet, webhook: Webhook | None, every_s: float = EVERY_S,
                 check_every_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.collector = ClusterCollector(client, job_names)
        self.state = AlertStateStore(client)
        self.rules, self.webhook = rules, webhook
        self.every_s, self.check_every_s, self.clock = every_s, check_every_s, clock
        self.started = clock()
        self.holding: dict[str, float] = {}  # alert id -> since when its condition holds
        self.values: dict[str, deque[tuple[float, float]]] = {}  # alert id -> (when, value)
        self.findings: dict[str, list[Finding]] = {}
        self._checked_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Evaluate in a daemon thread until ``stop``."""
        self._thread = threading.Thread(target=self._loop, name="clustersync-alerts",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.evaluate()
            except StoreError as exc:  # Redis away: nothing fires or resolves meanwhile
                log.warning("clustersync alerts: Redis failed, evaluating again in %.0f s: %s",
                            self.every_s, exc)
            except Exception:  # a bug must not end the alerts of a long-running serve
                log.exception("clustersync alerts: evaluation failed")
            self._stop.wait(self.every_s)

    def evaluate(self) -> list[dict[str, Any]]:
        """One evaluation of every rule; the transitions this process claimed (and sent)."""
        reading = self.collector.read()
        if not reading.up:
            return []
        self._scheduled_check(reading)
        given = CheckInput(reading, dict(self.findings))
        firing = self.state.firing()
        read_jobs = {report.job for _store, report in reading.jobs}
        sent = []
        for rule in self.rules.rules:
            sent += self._evaluate_rule(rule, self._samples(rule, given), firing, read_jobs)
        return sent

    def _scheduled_check(self, reading: ClusterReading) -> None:
        now = self.clock()
        if self.check_every_s <= 0 or (self._checked_at is not None
                                       and now - self._checked_at < self.check_every_s):
            return
        self._checked_at = now
        self.findings = {report.job: [f for f in check_job(store) if not f.action]
                         for store, report in reading.jobs}

    def _samples(self, rule: Rule, given: CheckInput) -> list[Sample]:
        if rule.metric:
            found = metric_samples(given.reading, rule.metric)
        else:
            found = CHECKS[str(rule.check)](given)
        return [s for s in found if all(s.labels.get(k) == v for k, v in rule.match.items())]

    def _evaluate_rule(self, rule: Rule, samples: Iterable[Sample],
                       firing: dict[str, dict[str, Any]],
                       read_jobs: set[str]) -> list[dict[str, Any]]:
        now, sent, seen = self.clock(), [], set()
        warm = now - self.started >= max(rule.for_s, rule.increase_over_s)
        for sample in samples:
            labels = dict(sample.labels)
            key = alert_id(rule, labels)
            seen.add(key)
            value = self._value(rule, key, sample.value, now)
            if not rule.holds(value):
                self.holding.pop(key, None)
                if key in firing and (warm or not rule.increase_over_s):
                    sent += self._resolve(rule, key, value)
                continue
            since = self.holding.setdefault(key, now)
            if now - since >= rule.for_s and key not in firing:
                sent += self._fire(rule, key, labels, value, sample.detail)
        gone = [key for key, record in firing.items()
                if record.get("rule") == rule.name and key not in seen]
        for key in gone if warm else ():
            if not self._vanished(firing[key].get("job"), read_jobs):
                continue
            self.holding.pop(key, None)
            sent += self._resolve(rule, key, None)
        return sent

    def _vanished(self, job: str | None, read_jobs: set[str]) -> bool:
        """An alert whose series is gone resolves if its job was read (a node of an earlier
        run, say) or no longer exists (purged); not for a job this process did not read (its
        list of jobs is older than the job)."""
        if job is None or job in read_jobs:
            return True
        store = JobStore(self.state.client, job, node_id="cli", writes_seen=None)
        try:
            return not store.status().exists
        except StoreError:
            return False

    def _value(self, rule: Rule, key: str, value: float, now: float) -> float:
        """The value compared: the sample's, or how much it grew over ``increase_over``."""
        if not rule.increase_over_s:
            return value
        seen = self.values.setdefault(key, deque())
        seen.append((now, value))
        while len(seen) > 1 and now - seen[1][0] >= rule.increase_over_s:
            seen.popleft()
        return value - seen[0][1]

    def _fire(self, rule: Rule, key: str, labels: dict[str, str], value: float,
              detail: str) -> list[dict[str, Any]]:
        at_ms = server_ms(self.state.client)
        record = {"rule": rule.name, "job": labels.get("job"), "node": labels.get("node"),
                  "labels": {**labels, **rule.labels}, "value": value, "detail": detail,
                  "summary": rule.summary, "since_ms": at_ms}
        if not self.state.claim_firing(key, record):
            return []
        return [self._send(record, "firing", at_ms, value)]

    def _resolve(self, rule: Rule, key: str, value: float | None) -> list[dict[str, Any]]:
        record = self.state.claim_resolved(key)
        if record is None:
            return []
        record.setdefault("rule", rule.name)
        return [self._send(record, "resolved", server_ms(self.state.client), value)]

    def _send(self, record: dict[str, Any], state: str, at_ms: int,
              value: float | None) -> dict[str, Any]:
        body = {"rule": record.get("rule"), "job": record.get("job"),
                "node": record.get("node"), "value": value, "state": state,
                "at": iso_ms(at_ms), "labels": record.get("labels", {}),
                "detail": record.get("detail", ""), "summary": record.get("summary", "")}
        if state == "resolved":
            body["firing_since"] = iso_ms(int(record.get("since_ms", at_ms)))
        self.state.log(body)
        log.warning("clustersync alert %s: %s %s%s", state, body["rule"],
                    body["job"] or "", f" node {body['node']}" if body["node"] else "")
        if self.webhook is not None:
            self.webhook.send(body)
        return body
