"""The client of a Redis Cluster (``redis+cluster://``): redis-py's ``RedisCluster``, and what the
store does differently with one.

Every key of a job shares its hash tag (keys.py), so each script call, pipeline and MULTI of a
job names keys of one slot and goes to the one primary that holds it; redis-py follows MOVED
and ASK after a failover or a resharding. What has no key is answered otherwise: TIME in a
pipeline is read by a one-line script keyed by the job (`queue_server_time`), INFO comes from
the job's primary (`node_of`), SCAN walks every primary (redis-py's ``scan_iter``), SCRIPT LOAD
goes to every primary, and the job's control channel is classic pub/sub, which a cluster
delivers to subscribers on every node.

The client learns the cluster's layout on its first command, not when it is built: a node
builds its client on Scrapy's reactor thread, which never waits on Redis, and a cluster that
cannot be reached yet is an outage like any other (the node retries), not a failed start.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import redis
from redis._parsers import Encoder
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

__all__ = ["LazyRedisCluster", "is_cluster", "memory_info", "node_of", "queue_server_time",
           "server_ms_of"]

#: attributes a plain client has and a cluster client has not: asked for by code that handles
#: both kinds, they must not make the client connect
_PLAIN_ONLY = frozenset({"connection_pool", "connection"})

#: what redis-py says when a node named in the URL is a Redis without cluster mode
NOT_A_CLUSTER = "Cluster mode is not enabled"

#: TIME, where a pipeline of a cluster client may not send a command without a key
_TIME_SCRIPT = "local t = redis.call('TIME') return {tonumber(t[1]), tonumber(t[2])}"


class LazyRedisCluster(RedisCluster):
    """``RedisCluster(startup_nodes=..., **options)``, built on its first use.

    A cluster that cannot be reached then raises redis-py's ``ConnectionError`` (an outage to
    the store), and the next use tries again.
    """

    def __init__(self, nodes: tuple[tuple[str, int], ...], **options: Any) -> None:
        self.__dict__["_lazy_nodes"] = nodes
        self.__dict__["_lazy_options"] = options
        self.__dict__["_init_lock"] = threading.Lock()
        # what register_script asks for; the real one replaces it
        self.encoder = Encoder(options.get("encoding", "utf-8"),
                               options.get("encoding_errors", "strict"),
                               options.get("decode_responses", False))

    def __getattr__(self, name: str) -> Any:
        # only reached for what __init__ did not set: RedisCluster's own state
        if name.startswith("__") or name in _PLAIN_ONLY or "_init_lock" not in self.__dict__:
            raise AttributeError(name)
        with self._init_lock:
            if "nodes_manager" not in self.__dict__:
                self._build()
        return object.__getattribute__(self, name)

    def _build(self) -> None:
        startup = [ClusterNode(host, port)  # type: ignore[no-untyped-call]
                   for host, port in self._lazy_nodes]
        try:
            RedisCluster.__init__(self, startup_nodes=startup, **self._lazy_options)
        except RedisClusterException as exc:
            self.__dict__.pop("nodes_manager", None)
            if NOT_A_CLUSTER in str(exc):  # a mistake in the URL: retrying cannot help
                raise redis.ResponseError(
                    f"{exc}: a redis+cluster:// URL must name nodes of a Redis Cluster "
                    "(cluster-enabled yes); for one Redis use redis://host:port/0") from exc
            raise redis.ConnectionError(str(exc)) from exc  # no node answered: an outage

    @property
    def built(self) -> bool:
        return "nodes_manager" in self.__dict__

    @property
    def lazy_options(self) -> dict[str, Any]:
        """The options every node is reached with (credentials among them)."""
        options: dict[str, Any] = self._lazy_options
        return options

    def another(self) -> LazyRedisCluster:
        """A client of the same cluster with connections of its own."""
        return LazyRedisCluster(self._lazy_nodes, **self._lazy_options)

    def close(self) -> None:
        if self.built:
            super().close()

    def __del__(self) -> None:
        if "_init_lock" in self.__dict__ and self.built:
            super().__del__()  # type: ignore[no-untyped-call]


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


def node_of(client: redis.Redis, key: str) -> redis.Redis:
    """The client of the primary that holds ``key`` (``client`` itself for one Redis): where
    INFO about a job's server is asked, and a job's first connection opened."""
    if not isinstance(client, RedisCluster):
        return client
    cluster = cast(RedisCluster, client)
    node = cluster.get_node_from_key(key)
    return cast(redis.Redis, cluster.get_redis_connection(node))


def memory_info(client: redis.Redis) -> dict[str, Any]:
    """INFO memory of one Redis; of a cluster, that of its fullest primary (used memory against
    its maxmemory, or the most used when none has a maxmemory): a job fills its own primary,
    and the first primary to fill stops the jobs it holds."""
    if not isinstance(client, RedisCluster):
        return client.info("memory")
    cluster = cast(RedisCluster, client)
    readings = cluster.info("memory", target_nodes=RedisCluster.PRIMARIES)
    if not isinstance(readings, dict) or "used_memory" in readings:  # one primary answered
        return cast(dict[str, Any], readings)

    def fullness(info: dict[str, Any]) -> tuple[float, int]:
        used, most = int(info.get("used_memory") or 0), int(info.get("maxmemory") or 0)
        return (used / most if most else 0.0), used

    return max(readings.values(), key=fullness, default={})


def queue_server_time(pipe: Any, key: str) -> None:
    """Add Redis's TIME to ``pipe`` (its reply: seconds, microseconds). A cluster client's
    pipeline refuses TIME (it has no key): there a script keyed by ``key`` reads it, on the
    primary of the job's slot, in the same MULTI when ``pipe`` is one."""
    if isinstance(pipe, redis.cluster.ClusterPipeline):
        pipe.execute_command("EVAL", _TIME_SCRIPT, 1, key)  # type: ignore[no-untyped-call, unused-ignore]
    else:
        pipe.time()


def server_ms_of(reply: Any) -> int:
    """Milliseconds of a TIME reply (`queue_server_time`'s)."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000
