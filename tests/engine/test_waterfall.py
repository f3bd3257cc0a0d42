"""The waterfall LRU cache (seed §3.4-3.5): new entries go to the fastest enabled tier, the LRU entry
of a full tier cascades down, the bottom tier deletes; reservations keep every tier within capacity."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HAS_NVME, HAS_TORCH, small_spec

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, StorageBackend
from kvbench_core.contracts.errors import StorageError
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.engine.cache.cache_types import EvictionPolicy, Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.engine.run.factory import create_backend

KiB = 1024
S = 64 * KiB  # the entry size of most tests
POOL = NoisePool(seed=3, pool_bytes=1 << 20, max_piece=4 << 20)


class Guarded(StorageBackend):
    """Wraps a real backend and checks, at every operation, what the cache promises it:
    the bytes stored never exceed the tier's capacity, and no two operations touch one key at once."""

    def __init__(self, inner: StorageBackend, capacity: float) -> None:
        super().__init__(inner.options, inner.context)
        self.inner, self.capacity = inner, capacity
        self.name, self.volatile, self.transfer_size = inner.name, inner.volatile, inner.transfer_size
        self.stored: dict[str, int] = {}
        self.violations: list[str] = []
        self.writes = 0
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def _enter(self, key: str) -> None:
        with self._lock:
            if key in self._busy:
                self.violations.append(f"two operations on {key!r} at once")
            self._busy.add(key)

    def _leave(self, key: str) -> None:
        with self._lock:
            self._busy.discard(key)

    def write(self, key: str, source: ByteSource) -> IOTiming:
        self._enter(key)
        try:
            with self._lock:
                self.writes += 1
                self.stored[key] = source.size
                if sum(self.stored.values()) > self.capacity:
                    self.violations.append(f"{sum(self.stored.values())} B stored > capacity {self.capacity}")
            return self.inner.write(key, source)
        finally:
            self._leave(key)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        self._enter(key)
        try:
            return self.inner.read(key, size, sink)
        finally:
            self._leave(key)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        self.inner.read_range(key, offset, out)

    def delete(self, key: str) -> None:
        self._enter(key)
        try:
            self.inner.delete(key)
            with self._lock:
                self.stored.pop(key, None)
        finally:
            self._leave(key)


def backend_options(kind: str, tmp_path: Path, name: str) -> dict[str, Any]:
    if kind == "gpu":
        return {"device": "cpu"}
    if kind == "nvme":
        return {"path": str(tmp_path / name), "fsync": False, "drop_cache": False, "transfer_size": "64KiB"}
    return {}


CacheFactory = Callable[..., MultiTierCache]


@pytest.fixture
def make_cache(tmp_path: Path) -> Iterator[CacheFactory]:
    """``make_cache([(kind, capacity), ...], **cache_kwargs)``: real backends, each wrapped in ``Guarded``."""
    opened: list[StorageBackend] = []

    def make(chain: list[tuple[str, float]], *, policy: EvictionPolicy | None = None, **kwargs: Any) -> MultiTierCache:
        tiers = []
        for index, (kind, capacity) in enumerate(chain):
            if kind == "gpu" and not HAS_TORCH:
                pytest.skip("the gpu tier needs torch")
            if kind == "nvme" and not HAS_NVME:
                pytest.skip("the kvbench-nvme plugin is not installed")
            name = f"{kind}{index}"
            context = BackendContext(tier_name=name, run_id="wf", concurrency=8)
            backend = create_backend({"name": name, "backend": kind,
                                      "options": backend_options(kind, tmp_path, name)}, context)
            backend.open()
            opened.append(backend)
            tiers.append(Tier(name=name, backend=Guarded(backend, capacity), capacity=capacity))
        telemetry = Telemetry(["batch"])
        telemetry.start_measuring()
        return MultiTierCache(tiers, telemetry, POOL.payload, policy=policy, **kwargs)

    yield make
    for backend in opened:
        backend.close()


def where(cache: MultiTierCache) -> dict[str, list[str]]:
    """Keys per tier, least recently used first."""
    return {tier.name: list(tier.lru) for tier in cache.tiers}


def assert_consistent(cache: MultiTierCache) -> None:
    """Usage is exactly what the tier stores; the backends hold exactly what the cache thinks."""
    for tier in cache.tiers:
        guard = tier.backend
        assert isinstance(guard, Guarded)
        assert guard.violations == []
        sizes = {key: cache.entry_size(key) for key in tier.lru}
        assert tier.usage == sum(sizes.values()), tier.name
        assert guard.stored == sizes, tier.name
        assert all(cache.location(key) == tier.name for key in tier.lru)
    assert cache.occupancy() == {t.name: {"entries": len(t.lru), "bytes": t.usage,
                                          "capacity_bytes": t.capacity} for t in cache.tiers}


def stored_bytes_are_the_payload(cache: MultiTierCache, key: str, size: int) -> bool:
    sink = VerifySink(POOL, key, np.empty(POOL.max_piece, dtype=np.uint8))
    assert cache.get(key, sink) is not None
    return sink.mismatches == 0


# -- the cascade, for every tier configuration of the seed's table ------------------------------------------

def chain(*kinds: str) -> Any:
    # The gpu tier runs on torch's CPU device here; importing torch costs seconds, so those are slow.
    marks = [pytest.mark.slow] if "gpu" in kinds else []
    return pytest.param(list(kinds), id=" -> ".join(kinds), marks=marks)


#: The seed's "Summary: Tier Configurations" (NVMe only, CPU -> NVMe, GPU -> NVMe, GPU -> CPU -> NVMe), the
#: memory-only chains, and a DRAM stand-in for the GPU so the three-tier cascade also runs in the fast suite.
CHAINS = [chain("nvme"), chain("cpu", "nvme"), chain("gpu", "nvme"), chain("gpu", "cpu", "nvme"),
          chain("cpu", "cpu", "nvme"), chain("gpu", "cpu"), chain("cpu"), chain("cpu", "cpu", "cpu")]


@pytest.mark.parametrize("kinds", CHAINS)
def test_lru_entries_cascade_down_and_the_bottom_tier_deletes(make_cache: CacheFactory, kinds: list[str]) -> None:
    # 2.5 entries of capacity at a target of 80%: every tier holds exactly two entries.
    cache = make_cache([(kind, 2.5 * S) for kind in kinds])
    keys = [f"e{i}" for i in range(2 * len(kinds) + 2)]
    for key in keys:
        assert cache.put(key, S) == cache.tiers[0].name  # new entries always land in the fastest tier
    newest_first = keys[::-1]
    assert where(cache) == {tier.name: newest_first[2 * i: 2 * i + 2][::-1] for i, tier in enumerate(cache.tiers)}
    assert [cache.location(key) for key in keys[:2]] == [None, None]  # the two oldest fell off the bottom
    assert cache.telemetry.evictions_deleted == 2
    demotions = cache.telemetry.demotion_count
    for upper, lower in zip(cache.tiers, cache.tiers[1:], strict=False):
        assert demotions[f"{upper.name}->{lower.name}"] == len(keys) - 2 * (cache.tiers.index(upper) + 1)
    assert_consistent(cache)
    # The bytes survive every hop.
    assert all(stored_bytes_are_the_payload(cache, key, S) for key in keys[2:])


def test_the_bottom_tier_deletes_the_file(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 2.5 * S), ("nvme", 2.5 * S)])
    disk = cache.tiers[1].backend.inner
    for key in ("a", "b", "c", "d"):
        cache.put(key, S)
    assert where(cache) == {"cpu0": ["c", "d"], "nvme1": ["a", "b"]}
    assert os.path.exists(disk.path_of("a"))
    cache.put("e", S)  # c cascades to the disk, whose LRU entry (a) is deleted
    assert where(cache) == {"cpu0": ["d", "e"], "nvme1": ["b", "c"]}
    assert not os.path.exists(disk.path_of("a"))
    # the tier directory holds the entries, the ownership marker and the live run record (dirlock, 22ad703)
    assert sorted(os.listdir(os.path.dirname(disk.path_of("b")))) == sorted(
        [os.path.basename(disk.path_of(k)) for k in ("b", "c")] + [".kvbench-owner", ".kvbench-run-wf"])
    cache.delete("b")
    assert not os.path.exists(disk.path_of("b"))
    cache.clear()
    assert not os.path.exists(disk.path_of("c"))
    assert [t.usage for t in cache.tiers] == [0, 0]


def test_demotion_bytes_are_counted_on_both_tiers(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 2.5 * S), ("cpu", 100 * S)])
    for key in ("a", "b", "c", "d"):
        cache.put(key, S)
    tiers = cache.telemetry.tiers
    # Two demotions: read from the upper tier, written to the lower one (the reference loses these writes).
    assert (tiers["cpu0"]["read"].ops, tiers["cpu0"]["read"].bytes) == (2, 2 * S)
    assert (tiers["cpu1"]["write"].ops, tiers["cpu1"]["write"].bytes) == (2, 2 * S)
    assert (tiers["cpu0"]["write"].ops, tiers["cpu0"]["write"].bytes) == (4, 4 * S)
    assert dict(cache.telemetry.demotions) == {"cpu0->cpu1": 2 * S}


def test_a_read_makes_an_entry_most_recently_used(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 2.5 * S), ("cpu", 100 * S)])
    cache.put("a", S)
    cache.put("b", S)
    assert cache.get("a") == "cpu0"
    cache.put("c", S)
    assert where(cache) == {"cpu0": ["a", "c"], "cpu1": ["b"]}


def test_a_miss_and_a_hit_are_counted_per_tier(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 2.5 * S), ("cpu", 100 * S)])
    for key in ("a", "b", "c"):
        cache.put(key, S)
    assert (cache.get("a"), cache.get("c"), cache.get("zzz")) == ("cpu1", "cpu0", None)
    assert dict(cache.telemetry.read_hits) == {"cpu1": 1, "cpu0": 1}
    assert cache.telemetry.read_misses == 1


# -- eviction policy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ratio", "held"), [(0.8, 8), (0.5, 5), (1.0, 10)])
def test_target_usage_ratio_is_where_eviction_starts(make_cache: CacheFactory, ratio: float, held: int) -> None:
    policy = EvictionPolicy(target_usage_ratio=ratio)
    cache = make_cache([("cpu", 10 * S), ("cpu", 100 * S)], policy=policy)
    for i in range(held):
        cache.put(f"k{i}", S)
    assert len(cache.tiers[0].lru) == held and not cache.tiers[1].lru
    cache.put("one-more", S)
    assert len(cache.tiers[0].lru) == held and list(cache.tiers[1].lru) == ["k0"]
    assert cache.tiers[0].usage <= ratio * cache.tiers[0].capacity


def test_entries_larger_than_the_limit_skip_a_tier(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 20 * S), ("cpu", 100 * S)])  # 95% of 20 S = 19 S
    assert cache.put("fits-alone", 19 * S) == "cpu0"  # above the 80% target, but an empty tier takes it
    assert cache.put("too-large", 19 * S + 1) == "cpu1"
    assert cache.put("next", 19 * S) == "cpu0"  # evicts the first to make room
    assert where(cache) == {"cpu0": ["next"], "cpu1": ["too-large", "fits-alone"]}
    policy = EvictionPolicy(large_entry_limit_ratio=0.5)
    cache = make_cache([("cpu", 20 * S), ("cpu", 100 * S)], policy=policy)
    assert (cache.put("half", 10 * S), cache.put("more-than-half", 10 * S + 1)) == ("cpu0", "cpu1")


def test_an_entry_too_large_for_every_tier_is_not_stored(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 4 * S), ("cpu", 8 * S)])
    assert cache.put("huge", 8 * S) is None
    assert cache.location("huge") is None and cache.telemetry.counters["allocation_failed"] == 1
    assert not cache.contains("huge")
    assert_consistent(cache)


def test_a_victim_skips_a_lower_tier_too_small_for_it(make_cache: CacheFactory) -> None:
    # It once emptied the small middle tier for nothing and then dropped the victim altogether.
    cache = make_cache([("cpu", 10 * S), ("cpu", 2 * S), ("cpu", 100 * S)])
    cache.put("small", S)
    cache.put("big1", 8 * S)
    cache.put("big2", 8 * S)
    assert cache.location("big1") == "cpu2"
    assert where(cache) == {"cpu0": ["big2"], "cpu1": ["small"], "cpu2": ["big1"]}
    assert cache.telemetry.demotion_count["cpu0->cpu2"] == 1
    assert stored_bytes_are_the_payload(cache, "big1", 8 * S)
    assert_consistent(cache)


def test_the_eviction_cap_stops_a_cascade(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 10 * S)], policy=EvictionPolicy(max_evictions=1))
    for i in range(8):
        cache.put(f"k{i}", S)
    assert cache.put("needs-three-evictions", 3 * S) is None
    assert cache.telemetry.counters["eviction_cap_hit"] == 1
    assert where(cache) == {"cpu0": [f"k{i}" for i in range(1, 8)]}  # one eviction happened, order kept
    assert_consistent(cache)


def test_the_recursion_limit_stops_a_deep_cascade(make_cache: CacheFactory) -> None:
    # The old behaviour is the named policy "drop" now (the default "refuse" has its own test).
    cache = make_cache([("cpu", 2.5 * S)] * 3, policy=EvictionPolicy(max_recursion_depth=1, no_room_below="drop"))
    for i in range(7):
        cache.put(f"k{i}", S)
    assert cache.telemetry.counters["recursion_limit_hit"] >= 1
    assert cache.telemetry.evictions_deleted == 0
    assert not cache.tiers[2].lru  # depth 2 (the bottom) was never reached
    assert_consistent(cache)


def test_replacing_an_entry_frees_the_old_bytes(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 2.5 * S), ("cpu", 100 * S)])
    cache.put("a", S)
    cache.put("b", S)
    cache.put("c", S)  # a is demoted
    assert cache.put("a", 2 * S) == "cpu0"
    assert where(cache) == {"cpu0": ["a"], "cpu1": ["b", "c"]}
    assert cache.tiers[0].usage == 2 * S and cache.tiers[1].usage == 2 * S
    assert_consistent(cache)


def test_a_failed_write_releases_its_reservation(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 10 * S)])
    guard = cache.tiers[0].backend

    def broken(key: str, source: ByteSource) -> IOTiming:
        raise OSError(28, "No space left on device")

    guard.write = broken  # type: ignore[method-assign]
    with pytest.raises(StorageError) as info:
        cache.put("k", S)
    assert str(info.value) == "tier 'cpu0': write of 'k' failed: No space left on device [errno 28]"
    assert cache.tiers[0].usage == 0 and not cache.contains("k") and cache.get("k") is None
    assert cache.telemetry.tiers["cpu0"]["write"].errors == 1


# -- promotion -------------------------------------------------------------------------------------------------


def demoted_entry(make_cache: CacheFactory, promotion: str) -> MultiTierCache:
    cache = make_cache([("cpu", 2.5 * S), ("cpu", 100 * S)], promotion=promotion)
    for key in ("old", "b", "c"):
        cache.put(key, S)
    assert cache.location("old") == "cpu1"
    return cache


def test_no_promotion_by_default_data_only_flows_down(make_cache: CacheFactory) -> None:
    cache = demoted_entry(make_cache, "none")
    assert [cache.get("old"), cache.get("old")] == ["cpu1", "cpu1"]
    assert cache.location("old") == "cpu1" and cache.telemetry.promotions == 0


def test_promotion_on_read_moves_a_hit_to_the_top_tier(make_cache: CacheFactory) -> None:
    cache = demoted_entry(make_cache, "on_read")
    assert cache.get("old") == "cpu1"  # served from where it was, then promoted
    assert cache.location("old") == "cpu0" and cache.telemetry.promotions == 1
    assert where(cache) == {"cpu0": ["c", "old"], "cpu1": ["b"]}  # b made room for it
    assert cache.get("old") == "cpu0"
    assert stored_bytes_are_the_payload(cache, "old", S)
    assert_consistent(cache)


# -- cold demotion -----------------------------------------------------------------------------------------------


def test_entries_idle_for_cold_after_move_down(make_cache: CacheFactory) -> None:
    now = [0.0]
    cache = make_cache([("cpu", 100 * S), ("cpu", 100 * S)], clock=lambda: now[0])
    cache.tiers[1].cold_after = 10.0
    cache.put("a", S)
    cache.put("b", S)
    now[0] = 5.0
    cache.get("a")  # a is touched at t=5
    assert cache.demote_cold() == 0
    now[0] = 12.0
    assert cache.demote_cold() == 1
    assert where(cache) == {"cpu0": ["a"], "cpu1": ["b"]}
    now[0] = 15.0
    assert cache.demote_cold() == 1 and cache.location("a") == "cpu1"
    assert cache.telemetry.counters["cold_demotions"] == 2


def test_the_cold_mover_starts_no_demotion_once_told_to_stop(make_cache: CacheFactory) -> None:
    """The runner's cold mover is told to stop when the window closes (engine/run/cold_mover.py): the
    demotion in flight ends, no other starts, and what is left moves at the next call."""
    now = [0.0]
    cache = make_cache([("cpu", 100 * S), ("cpu", 100 * S)], clock=lambda: now[0])
    cache.tiers[1].cold_after = 10.0
    for key in "abcde":
        cache.put(key, S)
    now[0] = 100.0
    asked = iter([False, False, True])
    assert cache.demote_cold(stop=lambda: next(asked, True)) == 2
    assert cache.demote_cold() == 3  # not told to stop: the rest


# -- concurrency -----------------------------------------------------------------------------------------------


def test_no_tier_ever_exceeds_its_capacity_under_concurrency(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 6 * S), ("cpu", 10 * S), ("cpu", 14 * S)], promotion="on_read")
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def user(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for i in range(40):
                cache.put(f"u{seed}-{i}", rng.choice([S // 2, S, 2 * S, 3 * S]))
                cache.get(f"u{rng.randrange(8)}-{rng.randrange(i + 1)}")
                cache.put(f"shared-{rng.randrange(3)}", S)  # many users storing the same key at once
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=user, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert_consistent(cache)
    assert cache.telemetry.demotion_count and cache.telemetry.evictions_deleted  # the cascade really ran
    cache.clear()
    assert [t.usage for t in cache.tiers] == [0, 0, 0]
    assert [t.backend.stored for t in cache.tiers] == [{}, {}, {}]


def test_concurrent_puts_of_one_key_store_it_once(make_cache: CacheFactory) -> None:
    # Two users missing the same shared prefix both store it.  This once double-counted the tier's
    # usage (a permanent leak) and let the backend see two writes of one key at once.
    cache = make_cache([("cpu", 100 * S)])
    start = threading.Barrier(8)

    def user() -> None:
        start.wait()
        for _ in range(25):
            cache.put("kv_system_prompt", S)

    threads = [threading.Thread(target=user) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.tiers[0].usage == S and list(cache.tiers[0].lru) == ["kv_system_prompt"]
    assert_consistent(cache)
    cache.delete("kv_system_prompt")
    assert cache.tiers[0].usage == 0


class BlockingReads(Guarded):
    """Reads of ``key`` wait for ``release`` (the entry stays busy meanwhile)."""

    def __init__(self, guard: Guarded, key: str) -> None:
        super().__init__(guard.inner, guard.capacity)
        self.key, self.started, self.release = key, threading.Event(), threading.Event()

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        if key == self.key:
            self.started.set()
            assert self.release.wait(30)
        return super().read(key, size, sink)


def test_an_entry_being_read_is_never_the_one_demoted(make_cache: CacheFactory) -> None:
    cache = make_cache([("cpu", 2.5 * S), ("cpu", 100 * S)])
    cache.tiers[0].backend = BlockingReads(cache.tiers[0].backend, "a")
    cache.put("a", S)
    cache.put("b", S)
    reader = threading.Thread(target=cache.get, args=("a",))
    reader.start()
    assert cache.tiers[0].backend.started.wait(30)
    cache.put("c", S)  # a is the LRU but locked by its reader: b goes instead
    cache.tiers[0].backend.release.set()
    reader.join()
    assert where(cache) == {"cpu0": ["c", "a"], "cpu1": ["b"]}


# -- capacity from the spec: 0 disables a tier, auto asks the backend ------------------------------------------


def test_capacity_zero_disables_a_tier(run_spec: Any) -> None:
    state, result = run_spec(small_spec(requests=6, cache={"tiers": [
        {"name": "off", "backend": "cpu", "capacity": 0},
        {"name": "on", "backend": "cpu", "capacity": "64MiB"}]}))
    assert [tier.name for tier in state.tiers] == ["on"]
    assert list(result["metrics"]["tiers"]) == ["on"]
    assert result["metrics"]["tiers"]["on"]["write"]["ops"] > 0


@pytest.mark.skipif(not HAS_NVME, reason="the kvbench-nvme plugin is not installed")
def test_auto_capacity_comes_from_the_backend(run_spec: Any, tmp_path: Path) -> None:
    _, result = run_spec(small_spec(requests=3, cache={"tiers": [
        {"name": "disk", "backend": "nvme", "capacity": "auto",
         "options": {"path": str(tmp_path / "tier"), "fsync": False}}]}))
    capacity = result["metrics"]["tiers"]["disk"]["capacity_bytes"]
    total = os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize
    assert 0 < capacity <= total  # the directory's free space
    assert result["declaration"]["tiers"]["capacities"]["value"]["disk"] == capacity


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TORCH, reason="the gpu tier needs torch")
def test_auto_capacity_without_an_answer_is_a_clear_error(run_spec: Any) -> None:
    state, _ = run_spec(small_spec(cache={"tiers": [{"name": "hbm", "backend": "gpu", "capacity": "auto",
                                                     "options": {"device": "cpu"}}]}))
    assert state.status == "failed"
    assert str(state.error) == ("cache.tiers[0].capacity: 'auto' is not supported by backend 'gpu' here; "
                                "declare a size such as 8GiB")
