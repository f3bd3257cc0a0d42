"""Where the waterfall may put an entry: the seed's large-entry and target-usage rules (seed §3.4).

Pure rules over the policy and the tiers, apart from the cache's locking and I/O, so
they read as the seed states them: an entry above ``large_entry_limit_ratio`` of a
tier's capacity skips that tier, and a tier takes an entry while its usage stays
under ``target_usage_ratio``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench_core.engine.cache.cache_types import Entry, EvictionPolicy, Tier
from kvbench_core.runspec.bounds import admits


@dataclass(frozen=True)
class Placement:
    """The placement rules of one cache: its tiers in waterfall order and its eviction policy."""

    tiers: list[Tier]
    policy: EvictionPolicy

    def admits(self, tier: Tier, size: int) -> bool:
        """The large-entry rule: an entry over the limit ratio of a tier's capacity skips that tier."""
        return admits(tier.capacity, size, self.policy.large_entry_limit_ratio)

    def order(self, size: int) -> list[Tier]:
        """Tiers in waterfall order, skipping those the entry is too large for (seed: >95% skips)."""
        return [tier for tier in self.tiers if self.admits(tier, size)]

    def demotion_target(self, index: int, size: int) -> int | None:
        """The first tier below ``index`` that admits an entry of ``size``."""
        for below in range(index + 1, len(self.tiers)):
            if self.admits(self.tiers[below], size):
                return below
        return None

    def fits(self, tier: Tier, size: int) -> bool:
        """Whether ``size`` more bytes keep ``tier`` under its target usage."""
        if tier.usage + size <= tier.capacity * self.policy.target_usage_ratio:
            return True
        # An entry larger than the target still fits an empty tier (it passed the large-entry rule).
        return tier.usage == 0 and size <= tier.capacity


def lock_lru_victim(tier: Tier) -> Entry | None:
    """Oldest entry of ``tier`` whose lock is free, taken out of the LRU (the caller holds the metadata lock).

    Only entries whose lock is free at once are candidates: an entry being read or moved is skipped,
    which also rules out lock-order deadlocks between entries."""
    for key, entry in tier.lru.items():
        if entry.lock.acquire(blocking=False):
            del tier.lru[key]
            return entry
    return None
