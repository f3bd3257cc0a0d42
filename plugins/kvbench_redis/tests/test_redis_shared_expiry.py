"""Expiry and completeness of shared entries (``kvbench_redis.shared``), and the commit race, against a real
redis-server.

With a ``ttl`` the parts once kept the expiry their ``SET PX`` gave them while the marker (``:parts``) got a
new one at each commit, a lost race's included: the bytes expired first, the next store of the entry
"deduplicated" onto the bare marker (sent nothing) and the read that followed failed with a ``KeyError``.
The deadlines are read with the server's own ``PEXPIRETIME``, so the checks are exact, not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from kvbench_redis.parts import part_count
from redis_servers import RedisServer

from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry

pytestmark = pytest.mark.redis

PART = 4096
KEY = "kv_system_ttl_t10"
SIZE = 3 * PART + 5  # four parts
#: Long enough that nothing expires during a test that does not wait for it.
LONG_TTL = "60s"


def shared_options(server: RedisServer, namespace: str, ttl: str | None = None) -> dict[str, Any]:
    return {"port": server.port, "part_size": PART, "shared_namespace": namespace,
            **({"ttl": ttl} if ttl else {})}


def namespace_keys(server: RedisServer, namespace: str) -> list[str]:
    return sorted(k.decode() for k in server.client().scan_iter(match=f"kvbench:shared:{namespace}:*"))


def entry_keys(backend: Any, key: str = KEY, size: int = SIZE) -> list[str]:
    """The server names of a committed entry: its parts, its marker, its holders."""
    names = backend._shared.names(key, size)
    entry = f"{names.base}:s{size}"
    return [*(f"{names.part_prefix}{i}" for i in range(part_count(size, backend.part_size))),
            f"{entry}:parts", f"{entry}:holders"]


def deadlines(server: RedisServer, keys: list[str]) -> dict[str, int]:
    """Each key's absolute expiry in unix ms, as the server keeps it (-1: none, -2: no such key)."""
    client = server.client()
    return {key: int(client.execute_command("PEXPIRETIME", key)) for key in keys}


def wait_until_gone(server: RedisServer, key: str, timeout: float = 10.0) -> None:
    """Wait for ``key`` to expire, by the server's own clock (PTTL says how long is left)."""
    client, deadline = server.client(), time.monotonic() + timeout
    while (left := client.pttl(key)) != -2:
        assert left != -1, f"{key} never expires"
        assert time.monotonic() < deadline, f"{key} still there after {timeout} s"
        time.sleep(max(left, 1) / 1000)


class _Source:
    """A payload that runs ``before_part(index)`` before it fills part ``index`` (once per part): the hook
    that lets a rival commit, or time pass, in the middle of a store."""

    def __init__(self, pool: NoisePool, before_part: Callable[[int], None], key: str = KEY,
                 size: int = SIZE) -> None:
        self.inner, self.size, self.before_part, self.seen = pool.payload(key, size), size, before_part, set()

    def fill(self, offset: int, out: memoryview) -> None:
        index = offset // PART
        if index not in self.seen:
            self.seen.add(index)
            self.before_part(index)
        self.inner.fill(offset, out)


def test_a_commit_gives_every_part_the_markers_deadline(redis_server: RedisServer,
                                                        open_backend: Callable[..., Any], pool: NoisePool) -> None:
    """A send that takes a while (here 5 ms between parts) once left part 0 expiring that much before the
    marker: every part's ``SET PX`` counted from when it was sent."""
    backend = open_backend(shared_options(redis_server, "ttl-commit", LONG_TTL))
    backend.write(KEY, _Source(pool, lambda index: time.sleep(0.005) if index else None))
    now_ms = int(redis_server.client().execute_command("TIME")[0]) * 1000
    found = deadlines(redis_server, entry_keys(backend))
    assert len(set(found.values())) == 1, found  # parts, marker, holders: one instant
    (deadline,) = set(found.values())
    assert now_ms < deadline <= now_ms + 61_000
    sizes = deadlines(redis_server, [backend._shared.names(KEY, SIZE).sizes])
    assert min(sizes.values()) >= deadline  # the lookup index outlives what it lists


def _cache(backend: Any, source_for: Callable[[str, int], Any]) -> tuple[MultiTierCache, Telemetry]:
    """One client's cache over the shared redis tier, its sources from ``source_for``."""
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    return MultiTierCache([Tier("redis", backend, 1 << 30)], telemetry, source_for), telemetry


def test_a_store_that_loses_the_commit_race_is_a_duplicate_booked_as_sent(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool) -> None:
    """The lost race, forced: this store's check finds no entry, then, while its parts are on the way, a
    rival commits the same entry.  Its commit drops its parts and holds the rival's; its bytes did travel."""
    options = shared_options(redis_server, "ttl-race", LONG_TTL)
    rival, loser = open_backend(options, run_id="rival"), open_backend(options, run_id="loser")
    rival_deadline: dict[str, int] = {}

    def rival_commits(index: int) -> None:
        if index == 0:  # after the loser's HOLD_IF_COMPLETE missed, before its COMMIT
            rival.write(KEY, pool.payload(KEY, SIZE))
            rival_deadline.update(deadlines(redis_server, entry_keys(rival)))
            time.sleep(0.005)  # a deadline renewed by the loser's commit would differ from the rival's

    cache, telemetry = _cache(loser, lambda key, size: _Source(pool, rival_commits, key, size))
    assert cache.put(KEY, SIZE) == "redis"
    assert rival.counters()["shared"]["stored"] == 1
    counts = loser.counters()["shared"]
    assert (counts["stored"], counts["duplicate"], counts["deduplicated"]) == (0, 1, 0)
    write = telemetry.tiers["redis"]["write"]
    assert (write.ops, write.bytes, write.commands, write.dedup_stores, write.dedup_bytes) == (1, SIZE, 4, 0, 0)
    # the duplicate moved no expiry: the entry still expires when the rival's commit said, all at once
    assert deadlines(redis_server, entry_keys(rival)) == rival_deadline
    assert len(set(rival_deadline.values())) == 1
    assert not [k for k in namespace_keys(redis_server, "ttl-race") if ":w" in k]  # its temp parts dropped
    sink = VerifySink(pool, KEY, np.empty(pool.max_piece, dtype=np.uint8))
    assert cache.get(KEY, sink) == "redis" and sink.mismatches == 0
    rival.delete(KEY)
    loser.delete(KEY)  # the last holder
    assert namespace_keys(redis_server, "ttl-race") == []


def test_an_entry_missing_a_part_is_complete_for_no_script(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool,
        verify: Callable[..., None]) -> None:
    """A part gone while its marker stays (``maxmemory`` eviction, or an expiry apart from it) is no entry: a
    lookup passes it by, and the next store sends the entry and replaces it whole."""
    options = shared_options(redis_server, "ttl-part")
    first = open_backend(options, run_id="first")
    first.write(KEY, pool.payload(KEY, SIZE))
    short = open_backend(options, run_id="short")
    short.write(KEY, pool.payload(KEY, PART + 1))  # a smaller entry under the same key, complete
    redis_server.client().unlink(entry_keys(first)[1])  # part 1 of the larger one
    lookup = open_backend(options, run_id="lookup")
    assert lookup.lookup(KEY) == PART + 1  # the largest *complete* one
    repair = open_backend(options, run_id="repair")
    timing = repair.write(KEY, pool.payload(KEY, SIZE))
    assert (timing.nbytes, timing.dedup_bytes) == (SIZE, 0)  # sent, not "deduplicated" onto the bare marker
    assert repair.counters()["shared"]["stored"] == 1
    verify(repair, KEY, SIZE)
    verify(first, KEY, SIZE)  # the first holder reads the whole entry again
    for backend in (first, short, lookup, repair):
        backend.delete(KEY)
    assert namespace_keys(redis_server, "ttl-part") == []


def test_an_expired_entry_goes_whole_and_the_next_store_sends_it(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool,
        verify: Callable[..., None]) -> None:
    """The review's repro (ttl 2 s there): a lost race renewed the marker alone, part 0 expired first, and a
    third client's store held the bare marker and its read failed with ``KeyError ... (part 0)``."""
    options = shared_options(redis_server, "ttl-expire", "300ms")
    first, second = open_backend(options, run_id="first"), open_backend(options, run_id="second")

    def first_commits(index: int) -> None:
        if index == 0:
            first.write(KEY, pool.payload(KEY, SIZE))
            time.sleep(0.05)  # the second store's commit comes 50 ms later: it once renewed the marker by that

    second.write(KEY, _Source(pool, first_commits))
    assert second.counters()["shared"]["duplicate"] == 1
    keys = entry_keys(first)
    wait_until_gone(redis_server, keys[0])  # part 0 expired ...
    assert redis_server.client().exists(*keys) == 0  # ... and at the same instant the marker and the rest
    third = open_backend(options, run_id="third")
    timing = third.write(KEY, pool.payload(KEY, SIZE))
    assert (timing.nbytes, timing.dedup_bytes) == (SIZE, 0)
    verify(third, KEY, SIZE)
    for backend in (first, second, third):
        backend.close()
    assert namespace_keys(redis_server, "ttl-expire") == []


def test_a_store_slower_than_the_ttl_fails_naming_the_cause_and_leaves_nothing(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool) -> None:
    """A temp part that expired before the commit once made the script's RENAME fail half way (``no such
    key``), leaving renamed parts without a marker."""
    backend = open_backend(shared_options(redis_server, "ttl-slow", "50ms"))
    temp_part_0 = f"{backend._shared.names(KEY, SIZE).temp_prefix}0"
    source = _Source(pool, lambda index: wait_until_gone(redis_server, temp_part_0) if index == 1 else None)
    with pytest.raises(OSError, match=r"the parts of 'kv_system_ttl_t10' expired before their commit "
                                      r"\(ttl 50 ms is shorter than the store took\)"):
        backend.write(KEY, source)
    assert namespace_keys(redis_server, "ttl-slow") == []
    assert backend.lookup(KEY) is None
    assert backend.counters()["shared"]["stored"] == backend.counters()["shared"]["duplicate"] == 0
