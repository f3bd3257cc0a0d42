"""``EntryGone`` (kvbench_core.contracts.errors): a tier that dropped an entry by a rule of its own (a ttl).
The cache reads it as a miss wherever it meets it: a read, the source side of a demotion or a promotion;
the entry is forgotten and counted in ``expired_reads``, and nothing else is booked.  The Redis tier's real
expiry is tested in plugins/kvbench_redis/tests/test_redis_ttl_miss.py."""

from __future__ import annotations

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext, ByteSink, IOTiming
from kvbench_core.contracts.errors import EntryGone
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry

SIZE = 3000


class ExpiringTier(CPUMemoryBackend):
    """A memory tier whose ``expired`` keys are gone when read (as a Redis tier's after its ttl); a key in
    ``expires_after_read`` is read once more, then gone."""

    def __init__(self, name: str) -> None:
        super().__init__({}, BackendContext(tier_name=name, run_id="t"))
        self.expired: set[str] = set()
        self.expires_after_read: set[str] = set()

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        if key in self.expired:
            raise EntryGone(f"{key!r} expired")
        timing = super().read(key, size, sink)
        if key in self.expires_after_read:
            self.expired.add(key)
        return timing

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        if key in self.expired:
            raise EntryGone(f"{key!r} expired")
        super().read_range(key, offset, out)


def cache_over(*tiers: Tier) -> tuple[MultiTierCache, Telemetry]:
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    pool = NoisePool(seed=3, pool_bytes=1 << 16, max_piece=1 << 16)
    return MultiTierCache(list(tiers), telemetry, pool.payload), telemetry


def test_a_victim_that_expired_above_is_forgotten_not_demoted() -> None:
    """Making room demotes the LRU entry; it expired in the upper tier: nothing moves, the room is made,
    the new entry is stored, and no write or read of the victim is booked."""
    upper = ExpiringTier("shared")
    below = Tier("disk", CPUMemoryBackend({}, BackendContext(tier_name="disk", run_id="t")), 10 * SIZE)
    cache, telemetry = cache_over(Tier("shared", upper, 2.5 * SIZE), below)
    cache.put("a", SIZE)
    cache.put("b", SIZE)
    upper.expired.add("a")
    assert cache.put("c", SIZE) == "shared"  # room made by forgetting "a"
    assert cache.location("a") is None and telemetry.counters["expired_reads"] == 1
    assert below.usage == 0 and telemetry.tiers["disk"]["write"].ops == 0
    assert telemetry.tiers["shared"]["read"].ops == 0 and not telemetry.errors
    assert cache.tiers[0].usage == 2 * SIZE


def test_an_entry_that_expired_between_its_read_and_its_promotion_is_forgotten() -> None:
    """Promotion on read copies the entry up after the read: it expired in between, so it is not promoted,
    the cache forgets it, and the room made for it above is given back (the read itself was a hit)."""
    dram = Tier("dram", CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t")), 2.5 * SIZE)
    shared = ExpiringTier("shared")
    cache, telemetry = cache_over(dram, Tier("shared", shared, 10 * SIZE))
    cache.promotion = "on_read"
    for key in ("a", "b", "c"):  # the third pushes "a" down to the shared tier
        cache.put(key, SIZE)
    assert cache.location("a") == "shared"
    shared.expires_after_read.add("a")
    assert cache.get("a") == "shared"  # read: a hit
    assert cache.location("a") is None and telemetry.counters["expired_reads"] == 1
    assert telemetry.counters.get("promotions", 0) == 0 and telemetry.promotions == 0
    assert dram.usage == SIZE and cache.tiers[1].usage == SIZE  # "c" above, "b" demoted to make room


def test_the_summary_says_how_many_reads_found_their_entry_expired() -> None:
    from kvbench_core.cli.run_cmd import outcome_lines

    assert outcome_lines({"cache": {"counters": {}}}, {}) == []
    (line,) = outcome_lines({"cache": {"counters": {"expired_reads": 15}}}, {})
    assert line == ("  expired: 15 reads of entries a tier's ttl had dropped, counted as misses "
                    "(cache.counters.expired_reads)")
