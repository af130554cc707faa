"""A node that dies holding many leases: how long the script calls that return them take.

    python bench/dead_node.py [--leases 10000] [--sites 100]

On a redis-server of its own: one node queues ``--leases`` URL-only requests over ``--sites``
sites and leases them all, then its liveness runs out; a second node's heartbeat declares it
dead and the second node leases until the queue is empty. Redis's slow log records every call
meanwhile. Prints the slowest script calls (the target: none of 10 ms or more) and checks that
every request came back once (the exit status).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

# testkit, the dev and test kit, is not installed: it is imported from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy_clustersync.store import JobStore, Push, make_client
from scrapy_clustersync.store.job_store import new_call_id
from testkit.redis_server import RedisServer

SLOW_MS = 10
LONG_MS = 600_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--sites", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        client = server.client()
        dead = JobStore(make_client(server.url), "job", "dying")
        epoch, _ = dead.join(ttl_ms=LONG_MS)
        ops = [Push(hashlib.sha1(str(n).encode()).digest(), 0, f"request {n}".encode(), 0,
                    f"site{n % args.sites}.example") for n in range(args.leases)]
        for first in range(0, len(ops), 2000):
            dead.flush(epoch, ops[first:first + 2000], new_call_id())
        held = {entry.entry_id for _ in range(args.leases // 1000 + 1)
                for entry in dead.lease(epoch, 1000, LONG_MS, new_call_id())}
        # its last heartbeat: live for 1 ms more
        dead.heartbeat(epoch, ttl_ms=1, lease_ms=LONG_MS, info={}, idle=False, idle_after_ms=0,
                       lease_ids=[])
        alive = JobStore(make_client(server.url), "job", "alive")
        alive.join(ttl_ms=LONG_MS)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        client.slowlog_reset()
        beat = alive.heartbeat(epoch, ttl_ms=LONG_MS, lease_ms=LONG_MS, info={}, idle=False,
                               idle_after_ms=0, lease_ids=[])
        back: list[str] = []
        while got := alive.lease(epoch, 200, LONG_MS, new_call_id()):
            back.extend(entry.entry_id for entry in got)
        calls = sorted((entry["duration"] / 1000 for entry in client.slowlog_get(1_000_000)
                        if str(entry["command"]).startswith(("b'EVAL", "EVAL"))), reverse=True)
    declared = {each.node: each.leases for each in beat.declared_dead}
    once = sorted(back) == sorted(held)
    slow = [ms for ms in calls if ms >= SLOW_MS]
    print(f"dead node: held {len(held):,} leases; declared dead with "
          f"{declared.get('dying', 0):,}; {len(back):,} leased again by the other node "
          f"({'each once' if once else 'NOT each once'})")
    print(f"  script calls: {len(calls)}; slowest {', '.join(f'{ms:.2f}' for ms in calls[:3])} ms;"
          f" {len(slow)} of {SLOW_MS} ms or more (target: none: "
          f"{'met' if not slow else 'NOT met'}; timing depends on what else the machine runs)")
    # the exit status follows what must hold whatever the machine: every request back once
    sys.exit(0 if once and len(held) == args.leases else 1)


if __name__ == "__main__":
    main()
