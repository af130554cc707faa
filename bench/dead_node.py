"""A node that dies holding many leases: how long the script calls that return them take.

    python bench/dead_node.py [--leases 10000] [--sites 100] [--queued 0]
                              [--queued-sites 10000] [--batch 200] [--beat-every 10]
                              [--every-command]

On a redis-server of its own: with ``--queued`` requests over ``--queued-sites`` sites queued
first (pushed by flush.lua calls with no dedup: `clustersync seed`, as bench/loadgen.py fills a
job, takes half an hour for 10M on a busy machine), one node queues ``--leases``
URL-only requests of priority 1 over ``--sites`` sites of their own and leases them, then its
liveness runs out; a second node's heartbeat declares it dead and the second node goes on as
a node does: it leases ``--batch`` requests, acks them in one flush, and sends a heartbeat
every ``--beat-every`` leases, until the dead node's leases are all back (and, with nothing
queued first, until the queue is empty). Redis's slow log records every command of 0.5 ms or
more meanwhile (the bench's own checks apart). Prints each script's calls with their p50, p99
and max (the target: p99 <= 5 ms) and every command of 10 ms or more (the target: none), and
checks that every lease of the dead node came back once, leased again or queued (the exit
status).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen import JOB, SCRIPTS, script_times

from scrapy_clustersync.store import Ack, JobStore, Push, PushFlags, make_client
from scrapy_clustersync.store.job_store import new_call_id
from scrapy_clustersync.store.records import as_text
from testkit.rates import percentile
from testkit.redis_server import RedisServer

SLOW_MS = 10
TARGET_P99_MS = 5
PRIORITY = 1
BENCH_CLIENT = "bench"
LONG_MS = 600_000
CALLS_KEPT = 2_000_000
FILL_PER_CALL = 5000
#: the slow log's threshold while the calls run (us): logging every command (0) would slow
#: every command a script runs; the calls below it are counted, their times shown as below it
LOGGED_US = 500


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--sites", type=int, default=100)
    parser.add_argument("--queued", type=int, default=0, help="requests queued first")
    parser.add_argument("--queued-sites", type=int, default=10_000,
                        help="the sites of the requests queued first")
    parser.add_argument("--rdb", type=Path,
                        help="with --queued: the job as filled, saved to this file if it does "
                             "not exist, else loaded from it (filling 10M takes half an hour)")
    parser.add_argument("--batch", type=int, default=200, help="requests per lease")
    parser.add_argument("--beat-every", type=int, default=10, help="leases per heartbeat")
    parser.add_argument("--every-command", action="store_true",
                        help="log every command: each script call's commands are counted (the "
                             "work it does, whatever else the machine runs; its times are "
                             "longer for the logging)")
    return parser.parse_args()


def fill(url: str, queued: int, sites: int) -> None:
    """``queued`` URL-only requests over ``sites`` sites, FILL_PER_CALL per flush."""
    filler = JobStore(make_client(url), JOB, "filler")
    epoch, _ = filler.join(ttl_ms=LONG_MS)
    for first in range(0, queued, FILL_PER_CALL):
        filler.flush(epoch, [Push(b"", 0, f"http://q{n % sites}.example/page/{n}".encode(),
                                  int(PushFlags.DONT_FILTER), f"q{n % sites}.example")
                             for n in range(first, min(queued, first + FILL_PER_CALL))],
                     new_call_id())
    beat(filler, epoch, ttl_ms=0)  # it leaves


def beat(store: JobStore, epoch: str, ttl_ms: int = LONG_MS) -> Any:
    return store.heartbeat(epoch, ttl_ms=ttl_ms, lease_ms=LONG_MS, info={}, idle=False,
                           idle_after_ms=0, lease_ids=[])


def dying_site(number: int, sites: int) -> str:
    return f"site{number % sites}.example"


def dying_node(url: str, args: argparse.Namespace) -> tuple[str, set[str]]:
    """The node that dies: it pushes and leases ``--leases`` requests; its epoch, what it holds.
    Its last heartbeat comes later (``last_beat``)."""
    dead = JobStore(make_client(url), JOB, "dying")
    epoch, _ = dead.join(ttl_ms=LONG_MS)
    ops = [Push(hashlib.sha1(str(n).encode()).digest(), PRIORITY, f"request {n}".encode(), 0,
                dying_site(n, args.sites)) for n in range(args.leases)]
    for first in range(0, len(ops), 2000):
        dead.flush(epoch, ops[first:first + 2000], new_call_id())
    held: set[str] = set()
    while len(held) < args.leases:
        got = dead.lease(epoch, min(1000, args.leases - len(held)), LONG_MS, new_call_id())
        held |= {entry.entry_id for entry in got}
    return epoch, held


def warm_up(alive: JobStore, epoch: str) -> None:
    """One call of each script, so that the measured ones are all EVALSHA (named by their SHA)."""
    beat(alive, epoch)
    got = alive.lease(epoch, 1, LONG_MS, new_call_id())
    alive.flush(epoch, [Ack(entry.entry_id) for entry in got] or [Ack("none")], new_call_id())


def reclaim(client: Any, alive: JobStore, epoch: str, args: argparse.Namespace,
            held: set[str]) -> tuple[Any, list[str], Counter[str]]:
    """The live node's loop; the declaring heartbeat's answer, the dead node's entries it got,
    and how many calls of each script it made."""
    declaring = beat(alive, epoch)
    calls: Counter[str] = Counter(heartbeat=1)
    back: list[str] = []
    leases = 0
    while True:
        got = alive.lease(epoch, args.batch, LONG_MS, new_call_id())
        calls["lease"] += 1
        back.extend(entry.entry_id for entry in got if entry.entry_id in held)
        if got:
            alive.flush(epoch, [Ack(entry.entry_id) for entry in got], new_call_id())
            calls["flush"] += 1
        leases += 1
        if leases % args.beat_every == 0:
            beat(alive, epoch)
            calls["heartbeat"] += 1
        if not got or (args.queued and leases % args.beat_every == 0):
            # (the bench's own reads: its client's commands are left out of the figures)
            owners = (as_text(value).split("|", 1)[1].split("\n", 1)[0]
                      for value in client.hvals(alive.keys.leased))
            if (not got or args.queued) and "dying" not in set(owners):
                break
    return declaring, back, calls


def still_queued(client: Any, alive: JobStore, sites: int) -> list[str]:
    """The entry ids queued in the dead node's sites' lists."""
    ids: list[str] = []
    for n in range(sites):
        key = alive.keys.frontier_list(0, PRIORITY, dying_site(n, sites))
        ids.extend(as_text(item).split("\t", 1)[0] for item in client.lrange(key, 0, -1))
    return ids


def commands_per_call(logged: list[dict[str, Any]]) -> dict[str, list[int]]:
    """How many commands each script call ran, from a slow log that logged every command (a
    script's commands are logged as they run, the script when it ends)."""
    counts: dict[str, list[int]] = {}
    inner = 0
    for entry in sorted(logged, key=lambda each: each["id"]):
        command = entry["command"]
        words = (command.decode(errors="replace") if isinstance(command, bytes)
                 else str(command)).split()
        if words and words[0].upper() in ("EVALSHA", "EVAL"):
            counts.setdefault(SCRIPTS.get(words[1], "other"), []).append(inner)
            inner = 0
        else:
            inner += 1
    return counts


def shown(ms: float) -> str:
    """A run time; one the slow log left out is below LOGGED_US."""
    return f"{ms:.2f} ms" if ms else f"<{LOGGED_US / 1000:.2f} ms"


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "redis"
        directory.mkdir()
        if args.queued and args.rdb and args.rdb.exists():
            shutil.copy(args.rdb, directory / "dump.rdb")
        with RedisServer(directory) as server:
            run(server, args)


def run(server: RedisServer, args: argparse.Namespace) -> None:
    """The bench on ``server``: prints its figures, exits with its status."""
    client = server.client()
    client.client_setname(BENCH_CLIENT)
    if args.queued and not (args.rdb and args.rdb.exists()):
        fill(server.url, args.queued, args.queued_sites)
        if args.rdb:
            client.save()
            shutil.copy(server.directory / "dump.rdb", args.rdb)
    alive = JobStore(make_client(server.url), JOB, "alive")
    epoch, _ = alive.join(ttl_ms=LONG_MS)
    warm_up(alive, epoch)  # (as in a job this version created: no lease to sweep)
    epoch, held = dying_node(server.url, args)
    beat(JobStore(make_client(server.url), JOB, "dying"), epoch, ttl_ms=1)  # its last
    time.sleep(0.01)
    client.config_set("slowlog-log-slower-than", 0 if args.every_command else LOGGED_US)
    client.config_set("slowlog-max-len", CALLS_KEPT)
    client.slowlog_reset()
    declaring, back, calls = reclaim(client, alive, epoch, args, held)
    logged = [entry for entry in client.slowlog_get(CALLS_KEPT)
              if as_text(entry.get("client_name") or "") != BENCH_CLIENT]
    back += still_queued(client, alive, args.sites)
    status = alive.status()
    times = {name: [s * 1000 for s in each] for name, each in script_times(logged).items()}  # ms
    slow = [entry for entry in logged if entry["duration"] >= SLOW_MS * 1000]
    for name, count in calls.items():  # the calls the log left out: below LOGGED_US
        logged_ms = times.setdefault(name, [])
        logged_ms.extend([0.0] * (count - len(logged_ms)))
    declared = {each.node: each.leases for each in declaring.declared_dead}
    once = sorted(back) == sorted(held)
    print(f"dead node: held {len(held):,} leases ({args.queued:,} queued besides); declared dead "
          f"with {declared.get('dying', 0):,}; {len(back):,} back: leased again by the other "
          f"node or queued ({'each once' if once else 'NOT each once'}); "
          f"{status.queued:,} queued after")
    worst = 0.0
    for name, ms in sorted(times.items()):
        p99 = percentile(ms, 0.99)
        worst = max(worst, p99)
        print(f"  {name:<9} {len(ms):>6} calls  p50 {shown(percentile(ms, 0.5))}  "
              f"p99 {shown(p99)}  max {shown(max(ms))}")
    met = "met" if worst <= TARGET_P99_MS else "NOT met"
    print(f"  p99 of every script <= {TARGET_P99_MS} ms: {met}; commands of {SLOW_MS} ms or "
          f"more: {len(slow)}"
          + "".join(f"\n    {entry['duration'] / 1000:.2f} ms {str(entry['command'])[:60]}"
                    for entry in slow[:10])
          + " (timing depends on what else the machine runs)")
    if args.every_command:
        for name, counts in sorted(commands_per_call(logged).items()):
            print(f"  {name:<9} commands per call: p50 {percentile(counts, 0.5):.0f}  "
                  f"p99 {percentile(counts, 0.99):.0f}  max {max(counts)}")
    # the exit status follows what must hold whatever the machine: every lease back once
    sys.exit(0 if once and len(held) == args.leases else 1)


if __name__ == "__main__":
    main()
