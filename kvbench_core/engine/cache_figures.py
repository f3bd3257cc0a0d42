"""Figures about the cache's state that the declaration reports: cache state and prefix reuse.

``cache_state`` (the declaration's cold / warm / steady-state condition):

- ``cold``: the measured window opened on an empty cache;
- ``warm``: it opened on a cache holding entries (warm-up requests, a decode-only or RAG population) but
  with room left in some bounded tier, so hit rates and the tier distribution still drift as it fills;
- ``steady``: every bounded tier was already at its eviction target when the window opened *and* had
  turned over once (evicted at least its capacity since the run began): evictions run through the whole
  window and no entry left from the filling-up remains, so what is measured is the cache's steady state.
  "At its eviction target" allows the eviction sawtooth: room is made only until the new entry fits, so
  a full tier sits anywhere between the target (``capacity x target_usage_ratio``) and the target less
  the largest entry it has taken (the last victim may have been that large, and is gone).  A fixed
  fraction of the target (the first rule) judged a full 16 MiB tier of 1.5 MiB entries warm or steady
  by where in the sawtooth the window happened to open.
"""

from __future__ import annotations

import math

from kvbench_core.engine.cache_types import Tier


def cache_state_at_open(tiers: list[Tier], target_usage_ratio: float) -> str:
    """``cold`` / ``warm`` / ``steady`` from the tiers when the window opened (see above)."""
    if not any(tier.usage for tier in tiers):  # stored or being stored
        return "cold"
    bounded = [tier for tier in tiers if not math.isinf(tier.capacity)]
    if bounded and all(_turned_over_and_full(tier, target_usage_ratio) for tier in bounded):
        return "steady"
    return "warm"


def _turned_over_and_full(tier: Tier, target_usage_ratio: float) -> bool:
    """Evicted its capacity since the run began, and full up to the eviction sawtooth (see above)."""
    return (tier.evicted_bytes >= tier.capacity
            and tier.usage + tier.largest_entry >= target_usage_ratio * tier.capacity)


def reuse_rate(counters: dict[str, int]) -> float | None:
    """Reads of earlier KV that hit ÷ such reads: shared prefixes and a conversation's previous turn
    (multi-turn reuse is prefix reuse of the whole earlier context).  None when neither was read."""
    reads = counters.get("prefix_reads", 0) + counters.get("turn_reads", 0)
    if not reads:
        return None
    return round((counters.get("prefix_hits", 0) + counters.get("turn_hits", 0)) / reads, 6)
