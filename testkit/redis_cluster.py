"""A real Redis Cluster for tests: ``redis-server --cluster-enabled yes`` processes on free ports
of 127.0.0.1, joined by ``redis-cli --cluster create``.

`RedisClusterGroup` runs ``masters`` primaries, each with ``replicas_per_master`` replicas (3 + 3
by default), each server in a directory of its own under the caller's. `start` returns once
every node reports ``cluster_state:ok`` and knows every other node, so any node answers for any
slot from then on; `stop` stops only the servers it started.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from ._service import Service
from .redis_server import LOCALHOST, RedisServer

__all__ = ["RedisClusterGroup", "redis_cli_binary"]

_POLL_S = 0.05
#: a node that stops answering is failed after this long (failovers in tests are quick)
NODE_TIMEOUT_MS = 2000


def redis_cli_binary() -> str | None:
    """Path of ``redis-cli`` (beside the ``redis-server`` package), None if there is none."""
    return shutil.which("redis-cli")


class ClusterServer(RedisServer):
    """One cluster node: ``redis-server --cluster-enabled yes`` with its nodes file in its
    directory, so two groups (or a restart in another directory) never share one."""

    def __init__(self, directory: str | Path, node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        super().__init__(directory, extra_args=(
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--repl-diskless-sync-delay", "0"))


class RedisClusterGroup(Service):
    """``masters`` primaries with ``replicas_per_master`` replicas each, as one Redis Cluster.

    ``url``: ``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,.../`` (every node, primaries first),
    what ``CLUSTERSYNC_REDIS_URL`` takes.
    """

    def __init__(self, directory: str | Path, masters: int = 3,
                 replicas_per_master: int = 1) -> None:
        self.directory = Path(directory)
        self.replicas_per_master = replicas_per_master
        count = masters * (1 + replicas_per_master)
        self.servers = [ClusterServer(self.directory / f"node-{i}") for i in range(count)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"{LOCALHOST}:{each.port}" for each in self.servers)
        return f"redis+cluster://{hosts}/"

    def start(self, timeout_s: float = 60.0) -> RedisClusterGroup:
        cli = redis_cli_binary()
        if cli is None:
            raise FileNotFoundError("redis-cli not found: install it (apt-get install "
                                    "redis-tools, or redis-server which brings it)")
        try:
            for server in self.servers:
                server.start()
            self._create(cli, timeout_s)
            self.wait_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, cli: str, timeout_s: float) -> None:
        addresses = [f"{LOCALHOST}:{each.port}" for each in self.servers]
        run = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas",
             str(self.replicas_per_master), "--cluster-yes"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
        if run.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{run.stdout}\n{run.stderr}")

    def wait_ok(self, timeout_s: float = 60.0) -> None:
        """Return once every running node says ``cluster_state:ok`` and knows all the others,
        and every primary's replicas take its writes: a replica just synced gets the
        primary's writes only after its first acknowledgement (up to a second later), and a
        primary killed before then takes them with it (`_replicated` waits for one)."""
        deadline = time.monotonic() + timeout_s
        running = [each for each in self.servers if each.is_running()]
        probes = [each.client(socket_timeout=1) for each in running]
        while time.monotonic() < deadline:
            try:
                if all(self._settled(probe, len(running), self.replicas_per_master)
                       for probe in probes):
                    break
            except (redis.RedisError, OSError):
                pass
            time.sleep(_POLL_S)
        else:
            raise RuntimeError("timed out waiting for the Redis cluster to be ok")
        for primary in self.primaries():
            self._replicated(primary, deadline)

    def _replicated(self, primary: RedisServer, deadline: float) -> None:
        """Write a key of ``primary``'s slots and WAIT until its replicas have it."""
        client = primary.client(socket_timeout=max(1.0, deadline - time.monotonic()))
        for i in range(100_000):
            key = f"testkit:replicated:{i}"
            try:
                client.set(key, "1")
            except redis.ResponseError:  # MOVED: another primary's slot
                continue
            pipe = client.pipeline(transaction=False)  # one connection: WAIT follows the SET
            pipe.set(key, "1")
            pipe.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
                "WAIT", self.replicas_per_master,
                                 int(max(0.0, deadline - time.monotonic()) * 1000))
            _, acked = pipe.execute()
            client.delete(key)
            if int(acked) < self.replicas_per_master:
                raise RuntimeError(f"the replicas of {primary.port} took no write in time")
            return

    @staticmethod
    def _settled(probe: redis.Redis, nodes: int, replicas: int) -> bool:
        info: Any = probe.cluster("info")
        if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) < nodes:
            return False
        replication: Any = probe.info("replication")
        if replication.get("role") != "master":
            return bool(replication.get("master_link_status") == "up")
        online = [value for name, value in replication.items()
                  if name.startswith("slave") and isinstance(value, dict)
                  and value.get("state") == "online"]
        return len(online) >= replicas

    def primaries(self) -> list[RedisServer]:
        """The servers that are primaries now (by their own word)."""
        found: list[RedisServer] = []
        for server in self.servers:
            if not server.is_running():
                continue
            role: Any = server.client(socket_timeout=1).info("replication")
            if role.get("role") == "master":
                found.append(server)
        return found

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
