"""A store of a shared entry another client committed already sends nothing (as a shared prefix cache checks
before it stores), and the engine books it as what it was: a stored entry, no written bytes, no command.

Against a real redis-server with three clients; the server's own ``total_net_input_bytes`` says what travelled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from redis_servers import RedisServer

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry

pytestmark = pytest.mark.redis

PART = 64 << 10
SIZE = 4 * PART + 5  # an entry of five parts
PROMPTS = ("kv_system_dedup_a_t10", "kv_system_dedup_b_t20")
#: What a client sends besides an entry's bytes: SET headers, the scripts, their arguments.  Far below
#: one entry, so a store that sent its entry cannot hide in it.
CONTROL_BYTES = 32 << 10


class _NeverFilled:
    """A payload that must not be read: a store without a transfer pulls nothing from its source."""

    size = SIZE

    def fill(self, offset: int, out: memoryview) -> None:
        raise AssertionError(f"the store read its source at {offset}: its bytes were about to be sent")


def received(server: RedisServer) -> int:
    return int(server.client().info("stats")["total_net_input_bytes"])


def options(server: RedisServer, namespace: str) -> dict[str, Any]:
    return {"port": server.port, "part_size": PART, "shared_namespace": namespace}


def test_storing_an_entry_another_client_committed_sends_none_of_its_bytes(
        start_server: Callable[..., RedisServer], open_backend: Callable[..., Any], pool: NoisePool,
        verify: Callable[..., None]) -> None:
    server = start_server()
    first, second = (open_backend(options(server, "dedup-one"), run_id=run) for run in ("a", "b"))
    before = received(server)
    sent = first.write(PROMPTS[0], pool.payload(PROMPTS[0], SIZE))
    first_traffic, before = received(server) - before, received(server)
    held = second.write(PROMPTS[0], _NeverFilled())
    second_traffic = received(server) - before
    assert (sent.nbytes, sent.commands, sent.dedup_bytes) == (SIZE, 5, 0)
    assert (held.nbytes, held.commands, held.dedup_bytes, held.host) == (0, 0, SIZE, 0.0)
    assert first_traffic >= SIZE > CONTROL_BYTES > second_traffic
    assert second.counters()["shared"]["deduplicated"] == 1 and second.counters()["shared"]["stored"] == 0
    first.delete(PROMPTS[0])  # the second client holds it now: it stays
    verify(second, PROMPTS[0], SIZE)
    second.delete(PROMPTS[0])  # the last holder deletes it
    assert not list(server.client().scan_iter(match="kvbench:shared:dedup-one:*"))


def _client(server: RedisServer, namespace: str, run_id: str, pool: NoisePool,
            dram: int | None = None) -> tuple[MultiTierCache, Telemetry, list[Any]]:
    """One client's cache: the shared redis tier, under a DRAM tier of ``dram`` bytes when given."""
    from kvbench_redis.backend import RedisBackend

    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    redis = RedisBackend(options(server, namespace), BackendContext(tier_name="redis", run_id=run_id))
    redis.open()
    tiers = [Tier("redis", redis, 1 << 30)]
    if dram is not None:
        tiers.insert(0, Tier("dram", CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id=run_id)), dram))
    return MultiTierCache(tiers, telemetry, pool.payload), telemetry, [tier.backend for tier in tiers]


def _close(backends: list[Any]) -> None:
    for backend in backends:
        backend.close()


def _written(telemetry: Telemetry) -> tuple[int, int, int, int]:
    """(written bytes, deduplicated bytes, write operations, stores without a transfer) over every tier."""
    writes = [ops["write"] for ops in telemetry.tiers.values()]
    return (sum(w.bytes for w in writes), sum(w.dedup_bytes for w in writes), sum(w.ops for w in writes),
            sum(w.dedup_stores for w in writes))


def test_three_clients_book_written_bytes_as_sent_and_stored_entries_as_transfers_plus_dedups(
        start_server: Callable[..., RedisServer], pool: NoisePool) -> None:
    server = start_server()
    clients = [_client(server, "dedup-three", f"c{i}", pool) for i in range(3)]
    try:
        before = received(server)
        for cache, _, _ in clients:  # one after the other: the first stores each prompt, the others hold it
            for key in (*PROMPTS, "u0_c1_turn_1"):  # two shared prompts and the client's private entry
                assert cache.put(key, SIZE) == "redis"
        traffic = received(server) - before
        figures = [_written(telemetry) for _, telemetry, _ in clients]
        assert figures[0] == (3 * SIZE, 0, 3, 0)
        assert figures[1] == figures[2] == (SIZE, 2 * SIZE, 1, 2)
        for (written, dedup, ops, dedups), (_, telemetry, _) in zip(figures, clients, strict=True):
            assert written + dedup == telemetry.counters["stored_entry_bytes"]  # the written_bytes check
            assert ops + dedups == 3  # every put stored an entry: a transfer or a store without one
            assert telemetry.tiers["redis"]["write"].commands == 5 * ops  # a dedup issued no data command
        sent = sum(written for written, *_ in figures)
        assert sent <= traffic < sent + 3 * CONTROL_BYTES  # what travelled is what was booked as written
        for cache, _, _ in clients:
            sink = VerifySink(pool, PROMPTS[1], np.empty(pool.max_piece, dtype=np.uint8))
            assert cache.get(PROMPTS[1], sink) == "redis" and sink.mismatches == 0
    finally:
        for _, _, backends in clients:
            _close(backends)
    assert server.client().dbsize() == 0


def test_a_demotion_onto_an_entry_another_client_committed_moves_and_reads_nothing(
        start_server: Callable[..., RedisServer], pool: NoisePool) -> None:
    server = start_server()
    owner, _, owner_backends = _client(server, "dedup-demote", "owner", pool)
    cache, telemetry, backends = _client(server, "dedup-demote", "later", pool, dram=SIZE * 3 // 2)
    try:
        owner.put(PROMPTS[0], SIZE)
        assert cache.put(PROMPTS[0], SIZE) == "dram"
        assert cache.put("u0_c1_turn_1", SIZE) == "dram"  # no room for two: the prompt goes down to redis
        assert cache.location(PROMPTS[0]) == "redis"
        dram, redis = telemetry.tiers["dram"], telemetry.tiers["redis"]
        assert (redis["write"].ops, redis["write"].bytes, redis["write"].dedup_stores) == (0, 0, 1)
        assert (dram["read"].ops, dram["read"].bytes) == (0, 0)  # nothing was pulled from the tier above
        assert telemetry.demotions["dram->redis"] == SIZE  # the entry did move down a tier
        written, dedup, _, _ = _written(telemetry)
        assert written + dedup == telemetry.counters["stored_entry_bytes"] + SIZE  # stored + demoted
        sink = VerifySink(pool, PROMPTS[0], np.empty(pool.max_piece, dtype=np.uint8))
        assert cache.get(PROMPTS[0], sink) == "redis" and sink.mismatches == 0
    finally:
        _close(backends)
        _close(owner_backends)
    assert server.client().dbsize() == 0
