"""What a node sees of each site it paces, as its node record shows it: the delay in force,
the backoff, a block and its requests in flight, bounded to the busiest sites; idle sites are
forgotten by ClusterTurns; the ``nodes`` command's cell reads the record."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from scrapy_clustersync.cli.node_sites import sites_cell
from scrapy_clustersync.node.node_record import NodeInfo
from scrapy_clustersync.node.thread_api import ReservedTurns
from scrapy_clustersync.plugin.cluster_turns import ClusterTurns
from scrapy_clustersync.plugin.site_summary import SITE_IDLE_S, SiteReport, SiteSeen, summary

from .test_cluster_turns import FakeLink


def bound_turns(delay: float = 0.5) -> tuple[ClusterTurns, FakeLink]:
    later: list[tuple[float, Callable[[], None]]] = []
    turns = ClusterTurns(download_delay=delay, randomize=False, site_delays={"slow.com": 3.0},
                         per_domain=0, lease_s=60.0,
                         later=lambda s, call: later.append((s, call)))
    link = FakeLink()
    turns.bind(link, lambda: None, lambda key: 1)
    return turns, link


def crawl_one(turns: ClusterTurns, link: FakeLink, site: str, now: float,
              turn: ReservedTurns | None = None) -> None:
    """One request of ``site`` waits for its turn, gets it and is let through at ``now``."""
    turns.wait_s(site, None, now)
    assert link.listener is not None
    link.listener(site, turn or ReservedTurns((now,), ("",), step_s=0.5))
    assert turns.wait_s(site, None, now) <= 0
    turns.taken(site, now)


def test_the_summary_lists_the_busiest_sites_first_and_counts_the_rest() -> None:
    # given 25 sites, site 7 with 3 requests in flight, the others used one after the other
    seen = {f"s{i}.com": SiteSeen(asked_s=1.0, used_at=float(i)) for i in range(25)}
    seen["s7.com"].in_flight = 3
    # when the record's summary is built with room for 20
    sites = summary(seen, now=30.0, shown_max=20, wall_now=1000.0)
    # then it names 20: the busy one first, then the sites used last; 5 more are counted
    names = [s["site"] for s in sites["shown"]]
    assert len(names) == 20 and sites["total"] == 25 and sites["more"] == 5
    assert names[:3] == ["s7.com", "s24.com", "s23.com"]
    assert "s0.com" not in names


def test_the_summary_says_the_delay_backoff_block_and_requests_in_flight() -> None:
    # given a node crawling slow.com (3 s delay) that Redis answered with a 6 s backoff and a
    # block of 30 s from a Retry-After
    turns, link = bound_turns()
    crawl_one(turns, link, "slow.com", 100.0,
              ReservedTurns((100.0,), ("",), step_s=6.0, backoff_s=6.0, blocked_until=130.0))
    # when the record's summary is built 10 s later
    sites = turns.summary(110.0)
    # then it shows what the node sees of slow.com
    [site] = sites["shown"]
    assert site["site"] == "slow.com" and site["delay_s"] == 6.0 and site["backoff_s"] == 6.0
    assert site["blocked_s"] == 20.0 and site["blocked_until"] is not None
    assert site["in_flight"] == 1 and site["idle_s"] == 10.0
    # and once its response came, nothing is in flight
    turns.done("slow.com")
    assert turns.summary(110.0)["shown"][0]["in_flight"] == 0


def test_a_429_with_retry_after_shows_the_site_blocked_at_once() -> None:
    # given a node crawling a site without any delay
    turns, link = bound_turns(delay=0.0)
    # when the site answers 429 with Retry-After: 30
    turns.answered("a.com", 429, {b"Retry-After": b"30"})
    # then the record shows it blocked for about 30 s, before Redis answered
    [site] = turns.summary(time.monotonic())["shown"]
    assert site["site"] == "a.com" and 29.0 < site["blocked_s"] <= 30.0
    assert site["blocked_until"] is not None


def test_a_site_without_delay_or_cap_is_not_in_the_summary() -> None:
    turns, link = bound_turns(delay=0.0)
    turns.wait_s("fast.com", None, 1.0)
    turns.taken("fast.com", 1.0)
    assert turns.summary(1.0) == {"total": 0, "shown": [], "more": 0}


def test_cluster_turns_forget_sites_idle_for_long_and_keep_busy_ones() -> None:
    # given a broad crawl: 500 sites crawled once, and one site with a request still in flight
    turns, link = bound_turns()
    for i in range(500):
        crawl_one(turns, link, f"s{i}.com", 10.0)
        turns.done(f"s{i}.com")
    crawl_one(turns, link, "busy.com", 10.0)
    assert turns.summary(10.0)["total"] == 501
    # when no request of them came for longer than the idle time
    sites = turns.summary(10.0 + SITE_IDLE_S + 1)
    # then only the busy site is left, in the summary and in every per-site record
    assert [s["site"] for s in sites["shown"]] == ["busy.com"] and sites["total"] == 1
    for per_site in (turns._seen, turns._reserved, turns._inflight, turns._retry_at,
                     turns._good, turns._asked):
        assert set(per_site) <= {"busy.com"}
    assert turns._slowed <= {"busy.com"}
    # and a forgotten site crawled again is asked for anew
    asks = len(link.asks)
    crawl_one(turns, link, "s3.com", 10.0 + SITE_IDLE_S + 2)
    assert len(link.asks) == asks + 1


def test_a_site_slowed_by_another_node_is_forgotten_once_idle() -> None:
    turns, link = bound_turns(delay=0.0)
    assert link.slowed_listener is not None
    link.slowed_listener("other.com")
    assert turns.summary(0.0)["total"] == 1
    turns.forget_idle(float("inf"))
    assert turns.summary(0.0)["total"] == 0 and "other.com" not in turns._slowed


def test_the_node_record_carries_the_sites_once_the_reactor_built_them() -> None:
    # given a node record and a report built at most once per heartbeat interval
    info = NodeInfo(None, "spider", False, inflight=lambda: 0, node_id="n1")
    assert "sites" not in info.snapshot()
    built: list[float] = []

    def build(now: float) -> dict[str, Any]:
        built.append(now)
        return {"total": 1, "shown": [], "more": 1}

    report = SiteReport(build, lambda sites: setattr(info, "sites", sites), every_s=60.0)
    # when the Redis thread hands things over twice in a row
    report.maybe_publish()
    report.maybe_publish()
    # then the summary was built once and the record carries it
    assert len(built) == 1 and info.snapshot()["sites"]["total"] == 1


def test_the_nodes_table_cell_names_the_busiest_sites_and_how_many_more() -> None:
    node = {"sites": {"total": 5, "more": 2, "shown": [
        {"site": "a.com", "delay_s": 0.5, "backoff_s": 0.0, "blocked_s": 0.0, "in_flight": 2},
        {"site": "b.com", "delay_s": 1.0, "backoff_s": 0.0, "blocked_s": 29.6, "in_flight": 0},
        {"site": "c.com", "delay_s": 4.0, "backoff_s": 4.0, "blocked_s": 0.0, "in_flight": 0},
    ]}}
    assert sites_cell(node) == "a.com 0.50s 2 out, b.com blocked 30s +3"
    assert sites_cell({}) == ""
