"""The checks alert rules name, over one read of a fakeredis job: a job with work queued and no
node fetching is stalled, a paused one is not; Redis's memory share; serve's alert options
travel to its worker processes whole."""

from __future__ import annotations

from scrapy_clustersync.api.alert_checks import CheckInput, job_stalled, node_dead, redis_memory
from scrapy_clustersync.api.alert_routes import AlertOptions
from scrapy_clustersync.api.metrics import ClusterCollector, ClusterReading
from scrapy_clustersync.store import JobStore


def read(store: JobStore) -> CheckInput:
    return CheckInput(ClusterCollector(store.client, lambda: ["shop"]).read())


def test_a_job_with_work_queued_and_no_node_fetching_is_stalled_and_a_paused_one_is_not(
    store: JobStore,
) -> None:
    [sample] = job_stalled(read(store))
    assert (dict(sample.labels), sample.value) == ({"job": "shop"}, 1.0)
    assert "1 request(s) queued" in sample.detail
    store.set_control("pause")
    assert [s.value for s in job_stalled(read(store))] == [0.0]


def test_a_job_without_nodes_has_no_dead_node(store: JobStore) -> None:
    assert node_dead(read(store)) == []


def test_the_memory_share_is_used_over_maxmemory_and_zero_without_a_limit() -> None:
    def share(used: int, limit: int) -> float:
        reading = ClusterReading(True, [], [], {"used_memory": used, "maxmemory": limit})
        return redis_memory(CheckInput(reading))[0].value

    assert share(900, 1000) == 0.9 and share(900, 0) == 0.0


def test_the_alert_options_reach_a_worker_process_whole() -> None:
    options = AlertOptions("alerts.toml", "http://127.0.0.1:9/", 2.0, 60.0)
    assert AlertOptions(**options.to_dict()) == options
