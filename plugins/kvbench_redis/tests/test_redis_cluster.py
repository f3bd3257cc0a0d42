"""The redis tier spanning a real three-primary Redis Cluster: placement, capacity, cleanup, resharding."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from kvbench_redis.backend import RedisBackend
from redis_servers import RedisCluster, RedisServer, free_port

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.run.factory import create_backend

pytestmark = pytest.mark.redis

PART = 4096
Open = Callable[..., RedisBackend]
Verify = Callable[[RedisBackend, str, int], None]


def keys_on(node: RedisServer, prefix: str) -> list[str]:
    return [key.decode() for key in node.client().scan_iter(match=f"{prefix}*")]


class TestRedisClusterConformance(BackendConformance):
    backend_name = "redis"

    @pytest.fixture(autouse=True)
    def _cluster(self, redis_cluster: RedisCluster) -> None:
        self.cluster = redis_cluster

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        options = {"port": self.cluster.seed.port, "cluster": True, "part_size": "64KiB"}
        return create_backend({"name": "redis0", "backend": "redis", "options": options}, context)

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return [key for node in self.cluster.nodes for key in keys_on(node, backend.key_prefix)]

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        options = {"port": free_port(with_bus=True), "cluster": True}
        return create_backend({"name": "redis0", "backend": "redis", "options": options}, context)


def test_entries_spread_over_the_primaries_and_each_entrys_parts_stay_on_one(
        redis_cluster: RedisCluster, open_backend: Open, pool: NoisePool, verify: Verify) -> None:
    backend = open_backend({"port": redis_cluster.seed.port, "cluster": True, "part_size": PART})
    for index in range(24):
        backend.write(f"e{index}", pool.payload(f"e{index}", 3 * PART))
    placement = {node.port: keys_on(node, backend.key_prefix) for node in redis_cluster.nodes}
    assert all(placement.values()), f"some primary holds no entry: { {p: len(k) for p, k in placement.items()} }"
    for index in range(24):
        holders = {port for port, keys in placement.items() if any(k.startswith(f"{backend.key_prefix}{{e{index}}}")
                                                                    for k in keys)}
        assert len(holders) == 1
        verify(backend, f"e{index}", 3 * PART)
    info = backend.describe()
    assert (info["cluster"], info["primaries"]) == (True, 3)


@pytest.mark.parametrize("ttl", [{}, {"ttl": "60s"}], ids=["no-ttl", "ttl"])  # PERSIST or PEXPIREAT at commit
def test_shared_entries_are_reference_counted_on_a_cluster(
        ttl: dict[str, str], redis_cluster: RedisCluster, open_backend: Open, pool: NoisePool,
        verify: Verify) -> None:
    """The claim, commit and release scripts name keys they derive from the entry's hash tag: on a cluster
    they must all land in the entry's slot, for entries spread over every primary."""
    options = {"port": redis_cluster.seed.port, "cluster": True, "part_size": PART, "shared_namespace": "cl",
               **ttl}
    writer, reader = open_backend(options, run_id="w"), open_backend(options, run_id="r")
    keys = [f"kv_system_{index}" for index in range(12)]
    for key in keys:
        writer.write(key, pool.payload(key, 2 * PART + 1))
        assert reader.lookup(key) == 2 * PART + 1
        writer.delete(key)
        verify(reader, key, 2 * PART + 1)
    assert all(keys_on(node, "kvbench:shared:cl:") for node in redis_cluster.nodes)
    reader.close()
    assert [key for node in redis_cluster.nodes for key in keys_on(node, "kvbench:shared:cl:")] == []


def test_capacity_auto_sums_the_primaries_maxmemory(redis_cluster: RedisCluster, open_backend: Open) -> None:
    backend = open_backend({"port": redis_cluster.seed.port, "cluster": True})
    assert backend.capacity_bytes() is None
    try:
        for megabytes, node in zip((10, 20, 30), redis_cluster.nodes, strict=True):
            node.client().config_set("maxmemory", f"{megabytes}mb")
        assert backend.capacity_bytes() == 60 << 20
    finally:
        for node in redis_cluster.nodes:
            node.client().config_set("maxmemory", "0")


def test_close_removes_this_runs_keys_on_every_node_and_nothing_else(
        redis_cluster: RedisCluster, open_backend: Open, pool: NoisePool) -> None:
    client = redis_cluster.client()
    foreign = [f"tenant:{index}" for index in range(10)]
    for key in foreign:
        client.set(key, b"theirs")
    backend = open_backend({"port": redis_cluster.seed.port, "cluster": True, "part_size": PART})
    for index in range(12):
        backend.write(f"e{index}", pool.payload(f"e{index}", 2 * PART))
    backend.close()
    assert [key for node in redis_cluster.nodes for key in keys_on(node, backend.key_prefix)] == []
    assert all(client.get(key) == b"theirs" for key in foreign)
    client.delete(*foreign)


def _move_slot(cluster: RedisCluster, key: str) -> None:
    """Migrate the slot of ``key`` (with its keys) to another primary, as a resharding would."""
    slot = cluster.client().keyslot(key)
    ids = {node.port: node.client().execute_command("CLUSTER", "MYID").decode() for node in cluster.nodes}
    source = next(node for node in cluster.nodes
                  if any(s[0] <= slot <= s[1] for s in _slot_ranges(node, ids[node.port])))
    target = next(node for node in cluster.nodes if node is not source)
    target.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
    source.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
    keys = source.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    if keys:
        source.client().execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    for node in cluster.nodes:
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])


def _slot_ranges(node: RedisServer, node_id: str) -> list[tuple[int, int]]:
    return [(int(start), int(end)) for start, end, *holders in node.client().execute_command("CLUSTER", "SLOTS")
            if holders[0][2].decode() == node_id]


def test_reads_and_writes_follow_a_slot_that_moved(
        redis_cluster: RedisCluster, open_backend: Open, pool: NoisePool, verify: Verify) -> None:
    backend = open_backend({"port": redis_cluster.seed.port, "cluster": True, "part_size": PART})
    for key in ("moved-read", "moved-write"):
        backend.write(key, pool.payload(key, 2 * PART + 1))
    _move_slot(redis_cluster, f"{backend.key_prefix}{{moved-read}}:p0")
    verify(backend, "moved-read", 2 * PART + 1)  # MOVED, slot map refreshed, read again
    _move_slot(redis_cluster, f"{backend.key_prefix}{{moved-write}}:p0")
    backend.write("moved-write", pool.payload("moved-write", 3 * PART))
    verify(backend, "moved-write", 3 * PART)
