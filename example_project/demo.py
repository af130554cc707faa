"""`make demo`: a real three-node cluster crawl with one node killed half-way, summarised.

Starts a local Redis (the installed redis-server on a free port; without one, an embedded
fakeredis server), serves a local test site, runs three `scrapy crawl site` nodes of this
project, kills one with SIGKILL half-way and prints what each node fetched, what was fetched
twice and what was lost. Nothing touches a Redis this script did not start.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from scrapy_clustersync.store import JobStore, make_client
from testkit.nodes import start_node
from testkit.redis_server import EmbeddedRedis, RedisServer, start_any_redis
from testkit.site import TestSite

PROJECT = Path(__file__).resolve().parent
NODES = ("node-1", "node-2", "node-3")
VICTIM = "node-2"
#: where each run keeps its nodes' logs and its Redis files (.demo/ is ignored by git)
DEMO_RUNS = PROJECT.parent / ".demo"
HEARTBEAT_S = 1.0
LEASE_TIMEOUT_S = 6.0
#: CLUSTERSYNC_NODE_DEAD_AFTER left unset: three heartbeat intervals
DEAD_AFTER_S = 3 * HEARTBEAT_S
console = Console(soft_wrap=True)


def start_demo_node(
    name: str, redis_url: str, start_url: str, workdir: Path
) -> subprocess.Popen[bytes]:
    """One node of the demo's cluster; its User-Agent is ``name``, so the site counts it apart."""
    settings = {
        "USER_AGENT": name, "CLUSTERSYNC_IDLE_CLOSE_AFTER": "2",
        "CLUSTERSYNC_LEASE_TIMEOUT": str(LEASE_TIMEOUT_S),
        "CLUSTERSYNC_HEARTBEAT_INTERVAL": str(HEARTBEAT_S),
        "CLUSTERSYNC_SPOOL_DIR": str(workdir / "spool"), "LOG_LEVEL": "INFO",
    }
    return start_node(
        "site", cwd=PROJECT, log_path=workdir / f"{name}.log",
        spider_args={"start_url": start_url}, settings=settings,
        env={"CLUSTERSYNC_REDIS_URL": redis_url},
    )


def crawl(site: TestSite, redis_url: str, workdir: Path) -> None:
    processes = {name: start_demo_node(name, redis_url, site.start_url, workdir) for name in NODES}
    console.print(f"started {len(NODES)} nodes: {', '.join(NODES)} (logs in {workdir})")
    half = len(site.page_paths()) // 2
    while sum(site.hits().values()) < half:
        time.sleep(0.05)
        if all(p.poll() is not None for p in processes.values()):
            break
    processes[VICTIM].send_signal(signal.SIGKILL)
    console.print(f"[red]kill -9 {VICTIM}[/red] after {sum(site.hits().values())} pages; "
                  f"after about {DEAD_AFTER_S:g}s without its heartbeat "
                  "(CLUSTERSYNC_NODE_DEAD_AFTER: three heartbeats) the other nodes declare it "
                  "dead, and its leased requests go back to the queue from that step on, in "
                  f"their order, long before their {LEASE_TIMEOUT_S:g}s leases would run out")
    for process in processes.values():
        process.wait(600)


def summarize(site: TestSite, redis_url: str) -> bool:
    hits, by_agent = site.hits(), site.hits_by_agent()
    pages = site.page_paths()
    twice = {path: n for path, n in hits.items() if n > 1}
    lost = [path for path in pages if not hits.get(path)]
    table = Table("node", "pages", "also fetched elsewhere", "note")
    for name in NODES:
        own = by_agent.get(name, {})
        note = "killed (SIGKILL) half-way" if name == VICTIM else ""
        table.add_row(name, str(sum(own.values())), str(sum(path in twice for path in own)), note)
    console.print(table)
    status = JobStore(make_client(redis_url), "site", "demo").status()
    console.print(f"site pages: {len(pages)}   fetched: {sum(hits.values())}   "
                  f"distinct pages fetched: {len(hits)}   fetched twice: {len(twice)}   "
                  f"[bold]lost: {len(lost)}[/bold]")
    console.print(f"Redis: done {status.counters.get('acked', 0)}, reclaimed from the killed "
                  f"node {status.counters.get('reclaimed', 0)}, queued {status.queued}, "
                  f"leased {status.leased}", markup=False)
    for dead in status.dead_nodes:
        console.print(f"node {dead.node} was declared dead by {dead.by} after "
                      f"{dead.silent_ms / 1000:.1f}s without a heartbeat; its "
                      f"{dead.leases_returned} leased requests went back to the queue from then",
                      markup=False)
    console.print("Pages fetched twice are the ones the killed node had fetched but not yet "
                  "acked: the delivery guarantee is at-least-once, never lost.")
    return not lost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=1500)
    parser.add_argument("--delay", type=float, default=0.01, help="seconds per page served")
    parser.add_argument("--embedded", action="store_true", help="use fakeredis, not redis-server")
    args = parser.parse_args()
    # kept after the demo, as the line that names it says: the nodes' logs are worth reading
    DEMO_RUNS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=DEMO_RUNS))
    redis: RedisServer | EmbeddedRedis = (
        EmbeddedRedis(workdir).start() if args.embedded else start_any_redis(workdir)
    )
    kind = "embedded fakeredis" if isinstance(redis, EmbeddedRedis) else "redis-server"
    console.print(f"Redis ({kind}) at {redis.url}")
    with TestSite(args.pages, delay_s=args.delay) as site:
        console.print(f"test site with {args.pages} pages at {site.url}")
        try:
            crawl(site, redis.url, workdir)
            ok = summarize(site, redis.url)
        finally:
            redis.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
