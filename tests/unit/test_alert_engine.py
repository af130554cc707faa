"""The alert engine over a fakeredis job: an alert fires once its condition held for the rule's
``for``, once between several serve processes, resolves once, and a growth rule compares how
much a metric grew; the webhook retries with backoff."""

from __future__ import annotations

from scrapy_clustersync.api.alert_engine import AlertEngine
from scrapy_clustersync.api.alert_rules import parse_rules
from scrapy_clustersync.api.webhook import Webhook
from scrapy_clustersync.store import DeadLetterWrite, JobStore
from scrapy_clustersync.store.alert_state import AlertStateStore
from scrapy_clustersync.store.job_store import new_call_id

RULES = parse_rules("""
[[rule]]
name = "queued"
metric = "clustersync_job_queued"
op = ">="
threshold = 1
for = 10
labels = { severity = "page" }

[[rule]]
name = "paused"
metric = "clustersync_job_state"
match = { state = "paused" }
op = ">="
threshold = 1

[[rule]]
name = "letters"
metric = "clustersync_job_dead_letters"
increase_over = 60
op = ">"
threshold = 0
""", "test")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now



def engine(store: JobStore, clock: Clock) -> AlertEngine:
    return AlertEngine(store.client, lambda: ["shop"], RULES, None, clock=clock)


def states(sent: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(body["rule"], body["state"]) for body in sent]


def test_an_alert_fires_once_its_condition_held_for_its_for_and_once_between_processes(
    store: JobStore,
) -> None:
    # given two serve processes evaluating the same rules on the same Redis
    clock = Clock()
    first, second = engine(store, clock), engine(store, clock)
    # when the queue is not empty for less than the rule's `for`, nothing fires
    assert first.evaluate() == [] and second.evaluate() == []
    clock.now += 5
    assert first.evaluate() == []
    # then once it held for 10 s, exactly one of the two sends it
    clock.now += 6
    sent = first.evaluate() + second.evaluate() + first.evaluate()
    assert states(sent) == [("queued", "firing")]
    body = sent[0]
    assert (body["job"], body["node"], body["value"]) == ("shop", None, 1.0)
    assert body["labels"] == {"job": "shop", "severity": "page"}
    assert str(body["at"]).endswith("Z") or "+00:00" in str(body["at"])
    assert list(AlertStateStore(store.client).firing()) == ['queued{"job":"shop"}']


def test_an_alert_resolves_once_when_its_condition_no_longer_holds(store: JobStore) -> None:
    # given a paused job, its alert firing, seen by two serve processes
    clock = Clock()
    first, second = engine(store, clock), engine(store, clock)
    store.set_control("pause")
    assert ("paused", "firing") in states(first.evaluate())
    assert "paused" not in {b["rule"] for b in second.evaluate()}
    # when it is resumed
    store.set_control("resume")
    sent = first.evaluate() + second.evaluate() + first.evaluate()
    # then exactly one of them sent the resolving, and nothing fires
    assert [s for s in states(sent) if s[0] == "paused"] == [("paused", "resolved")]
    log = AlertStateStore(store.client).recent(10)
    assert [(e["rule"], e["state"]) for e in log if e["rule"] == "paused"] == [
        ("paused", "resolved"), ("paused", "firing")]
    assert "firing_since" in log[0]
    assert not any(key.startswith("paused") for key in AlertStateStore(store.client).firing())


def test_a_growth_rule_fires_on_new_dead_letters_and_resolves_once_none_came_for_its_window(
    store: JobStore,
) -> None:
    clock = Clock()
    alerts = engine(store, clock)
    assert "letters" not in {b["rule"] for b in alerts.evaluate()}
    # when a dead letter comes
    epoch = store.ensure_job()
    store.flush(epoch, [DeadLetterWrite("refused", b"what")], new_call_id())
    clock.now += 5
    assert ("letters", "firing") in states(alerts.evaluate())
    # then no more for the window: resolved
    clock.now += 30
    assert "letters" not in {b["rule"] for b in alerts.evaluate()}
    clock.now += 61
    assert ("letters", "resolved") in states(alerts.evaluate())


def test_the_webhook_retries_with_backoff_and_gives_up_after_its_tries() -> None:
    tries: list[str] = []

    def flaky(url: str, body: dict[str, object]) -> None:
        tries.append(url)
        if len(tries) < 3:
            raise OSError("connection refused")

    hook = Webhook("http://127.0.0.1:9/", flaky, first_backoff_s=0.001)
    try:
        assert hook.deliver({"rule": "r", "state": "firing"}) and len(tries) == 3

        def down(url: str, body: dict[str, object]) -> None:
            raise OSError("down")

        hook.post = down
        assert not hook.deliver({"rule": "r", "state": "firing"})
    finally:
        hook.stop()


CONSISTENCY = parse_rules("""
[[rule]]
name = "consistency"
check = "consistency"
op = ">"
threshold = 0
""", "test")


def test_the_scheduled_check_runs_at_its_interval_and_its_findings_fire_an_alert(
    store: JobStore,
) -> None:
    # given serve checking every 60 s, and a job whose counters do not add up
    clock = Clock()
    alerts = AlertEngine(store.client, lambda: ["shop"], CONSISTENCY, None, clock=clock,
                         check_every_s=60)
    store.client.hset(store.keys.stats, "pushed", 5)
    # then the first evaluation checks and fires, naming what it found
    sent = alerts.evaluate()
    assert states(sent) == [("consistency", "firing")]
    assert "counters" in str(sent[0]["detail"]) and sent[0]["value"] == 1.0
    # when it is mended, the check runs again only once its interval passed
    store.client.hset(store.keys.stats, "pushed", 1)
    clock.now += 30
    assert alerts.evaluate() == []
    clock.now += 31
    assert states(alerts.evaluate()) == [("consistency", "resolved")]


def test_without_the_scheduled_check_the_consistency_rule_has_nothing_to_read(
    store: JobStore,
) -> None:
    store.client.hset(store.keys.stats, "pushed", 5)
    alerts = AlertEngine(store.client, lambda: ["shop"], CONSISTENCY, None, clock=Clock())
    assert alerts.evaluate() == [] and alerts.findings == {}
