"""An entry a Redis tier's ``ttl`` expired is a miss, not a failure (``EntryGone``, docs/tiers/redis.md):
a cache with a ttl forgets entries, the run reads that as a miss, counts it (``expired_reads``) and goes on.
Without a ttl a missing entry is still an error: nothing in the tier's own rules explains it.  Expiry is
forced with the server's PEXPIRE and waited for by its own clock, not slept for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis_servers import RedisServer

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import StorageError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry

pytestmark = pytest.mark.redis

PART = 4096
SIZE = 3 * PART + 7


def expire_now(server: RedisServer, backend: Any) -> None:
    """Every key of this backend's run, expired by the server (PEXPIRE 1 ms), and gone by its clock."""
    client = server.client()
    keys = list(client.scan_iter(match=f"{backend.key_prefix}*"))
    assert keys
    for key in keys:
        client.pexpire(key, 1)
    for key in keys:
        while client.pttl(key) != -2:
            pass


def cache_over(tiers: list[Tier], pool: NoisePool) -> tuple[MultiTierCache, Telemetry]:
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    return MultiTierCache(tiers, telemetry, pool.payload), telemetry


def test_a_read_of_an_expired_entry_is_a_miss_and_the_entry_is_forgotten(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART, "ttl": "1h"})
    cache, telemetry = cache_over([Tier("redis", backend, 1 << 30)], pool)
    assert cache.put("k", SIZE) == "redis"
    expire_now(redis_server, backend)
    assert cache.get("k") is None  # a miss, not a StorageError
    assert telemetry.counters["expired_reads"] == 1 and telemetry.read_misses == 1
    assert cache.location("k") is None and cache.tiers[0].usage == 0
    assert telemetry.tiers["redis"]["read"].ops == 0 and not telemetry.errors  # no operation, no error
    assert cache.get("k") is None and telemetry.counters["expired_reads"] == 1  # now a plain miss


def test_without_a_ttl_a_missing_entry_is_still_an_error(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART})
    cache, _ = cache_over([Tier("redis", backend, 1 << 30)], pool)
    assert cache.put("k", SIZE) == "redis"
    expire_now(redis_server, backend)
    with pytest.raises(StorageError, match="no entry 'k'"):
        cache.get("k")


def test_an_entry_demoted_to_the_redis_tier_that_expired_there_is_a_miss(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool) -> None:
    """An entry demoted from DRAM to the redis tier expires there: reading it (promotion on) is a miss, and
    the entry leaves both the index and the redis tier's usage."""
    dram = Tier("dram", CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t")), 2.5 * SIZE)
    backend = open_backend({"port": redis_server.port, "part_size": PART, "ttl": "1h"})
    cache, telemetry = cache_over([dram, Tier("redis", backend, 1 << 30)], pool)
    cache.promotion = "on_read"
    for key in ("a", "b", "c"):  # the third pushes "a" down to redis
        cache.put(key, SIZE)
    assert cache.location("a") == "redis"
    expire_now(redis_server, backend)
    assert cache.get("a") is None
    assert telemetry.counters["expired_reads"] == 1 and cache.location("a") is None
    assert cache.tiers[1].usage == 0 and dram.usage == 2 * SIZE
