"""The node tables of `status`, `nodes` and `top` fit the width they are given, the columns that
matter first; a job's run is read back from its meta hash, also for a job from before runs."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from scrapy_clustersync.cli.node_view import (
    NODE_COLUMNS,
    group_nodes,
    hidden_line,
    node_table,
    state_text,
)
from scrapy_clustersync.store.job_runs import RunStart
from scrapy_clustersync.store.script_results import JobStatus

NODE = "ip-10-0-12-34.ec2.internal:40123:a1b2c3"


def record(node: str = NODE, scrapy: str = "2.13.3", **fields: Any) -> dict[str, Any]:
    return {"id": node, "alive": True, "state": "crawling", "pages": 12345,
            "pages_per_min": 2400.0, "leased": 32, "items": 99, "errors": 0, "buffered": 0,
            "host": "ip-10-0-12-34", "pid": 40123, "cpu_percent": 55, "rss_bytes": 2**27,
            "versions": {"clustersync": "0.1.0", "python": "3.11.7", "scrapy": scrapy},
            "silent_s": 0.4, **fields}


def rendered(records: list[dict[str, Any]], width: int) -> list[str]:
    out = Console(width=width, record=True)
    with out.capture() as captured:
        out.print(node_table(records, width))
    return captured.get().splitlines()


def test_at_80_columns_the_table_keeps_node_state_rate_pages_and_held_uncut() -> None:
    lines = rendered([record()], 80)
    assert lines[0].split() == ["node", "state", "pages/min", "pages", "held"]
    assert lines[2].split() == [NODE, "crawling", "2400", "12345", "32"]
    assert all(len(line) <= 80 for line in lines) and "…" not in "".join(lines)


def test_a_wide_table_adds_columns_by_rank_and_versions_only_when_they_differ() -> None:
    same = rendered([record(), record(NODE + "x")], 200)[0].split()
    differ = rendered([record(), record(NODE + "x", scrapy="2.19.0")], 200)[0].split()
    assert "versions" not in same and "host" in same
    assert "versions" in differ


def test_every_column_fits_when_the_width_allows_and_no_row_wraps() -> None:
    lines = rendered([record()], 1000)
    assert lines[0].split()[:3] == ["node", "state", "pages/min"]
    assert len(lines) == 3 and all(c.header.split()[0] in lines[0] for c in NODE_COLUMNS)


def test_a_run_reads_back_from_meta_and_a_job_from_before_runs_is_one_more_than_its_restarts(
) -> None:
    run = RunStart.from_meta({"run": "3", "run_started_ms": "1700", "run_base": '{"acked": 5}'})
    old = RunStart.from_meta({"restarts": "2", "restarted_ms": "1600", "created_ms": "1000"})
    new = RunStart.from_meta({"created_ms": "1000"})
    assert (run.number, run.started_ms, run.base, run.known) == (3, 1700, {"acked": 5}, True)
    assert (old.number, old.started_ms, old.known) == (3, 1600, False)
    assert (new.number, new.started_ms, new.known) == (1, 1000, True)


def test_nodes_of_earlier_runs_and_dead_for_long_are_summed_up_in_one_line() -> None:
    # given run 2 started at 10,000 ms; a node last heard of before it, one dead for 11 min,
    # one silent for 20 s, and one alive
    nodes = [
        record("old", alive=False, state="closed", last_beat_ms=9_000),
        record("gone", alive=False, state="dead", last_beat_ms=20_000, silent_s=660.0),
        record("quiet", alive=False, state="silent", last_beat_ms=20_000, silent_s=20.0),
        record("live", last_beat_ms=700_000),
    ]
    report = JobStatus("site", True, 0, 0, 0, 0, {}, None, True, 700_000, nodes=nodes,
                       meta={"run": "2", "run_started_ms": "10000"}, pruned={"nodes": 4})
    # when they are grouped
    groups = group_nodes(report)
    # then the live and the silent one are listed, the others summed up
    assert [n["id"] for n in groups.listed(False)] == ["quiet", "live"]
    assert len(groups.listed(True)) == 4
    assert hidden_line(groups, False) == ("+1 node(s) of earlier runs, 1 dead > 10 min: --all to "
                                          "list; 4 older node(s) pruned "
                                          "(CLUSTERSYNC_NODE_RETENTION)")
    assert state_text(nodes[2]) == "silent for 20s"
