"""Through the waterfall cache: a local miss on a shared Redis tier is a hit on another client's entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from redis_servers import RedisServer

from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry

pytestmark = pytest.mark.redis


def _cache(backend: Any, pool: NoisePool) -> tuple[MultiTierCache, Telemetry]:
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    return MultiTierCache([Tier("redis", backend, 1 << 30)], telemetry, pool.payload), telemetry


def test_a_second_client_hits_the_first_clients_entry(redis_server: RedisServer, pool: NoisePool,
                                                      open_backend: Callable[..., Any]) -> None:
    options = {"host": "127.0.0.1", "port": redis_server.port, "shared_namespace": "cache-test", "part_size": 4096}
    writer_cache, _ = _cache(open_backend(options, run_id="client-a"), pool)
    reader_backend = open_backend(options, run_id="client-b")
    reader_cache, telemetry = _cache(reader_backend, pool)
    size = 3 * 4096 + 11
    writer_cache.put("kv_system_abc", size)

    sink = VerifySink(pool, "kv_system_abc", np.empty(pool.max_piece, dtype=np.uint8))
    assert reader_cache.get("kv_system_abc", sink) == "redis"
    assert sink.mismatches == 0
    assert telemetry.counters["shared_tier_hits"] == 1
    assert reader_cache.occupancy()["redis"]["bytes"] == 0  # not the reader's bytes to account for

    reader_cache.clear()  # the reader forgets it; the writer's entry stays in the shared tier
    assert reader_backend.lookup("kv_system_abc") == size
    assert reader_cache.get("never-written") is None


def test_a_private_tier_never_looks_up_other_runs(redis_server: RedisServer, pool: NoisePool,
                                                  open_backend: Callable[..., Any]) -> None:
    options = {"host": "127.0.0.1", "port": redis_server.port}
    writer_cache, _ = _cache(open_backend(options, run_id="run-a"), pool)
    writer_cache.put("entry", 100)
    reader_cache, _ = _cache(open_backend(options, run_id="run-b"), pool)
    assert reader_cache.get("entry") is None
