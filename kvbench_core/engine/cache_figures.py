"""Figures about the cache's state that the declaration reports: cache state and prefix reuse.

``cache_state`` (the declaration's cold / warm / steady-state condition):

- ``cold``: the measured window opened on an empty cache;
- ``warm``: it opened on a cache holding entries (warm-up requests, a decode-only or RAG population) but
  with room left in some bounded tier, so hit rates and the tier distribution still drift as it fills;
- ``steady``: every bounded tier was already at its eviction target (``STEADY_FILL`` of
  ``capacity x target_usage_ratio``) when the window opened *and* had turned over once (evicted at
  least its capacity since the run began): evictions run through the whole window and no entry left
  from the filling-up remains, so what is measured is the cache's steady state.
"""

from __future__ import annotations

import math

from kvbench_core.engine.cache_types import Tier

#: A tier this close to its eviction target counts as full for ``steady``.
STEADY_FILL = 0.9


def cache_state_at_open(tiers: list[Tier], target_usage_ratio: float) -> str:
    """``cold`` / ``warm`` / ``steady`` from the tiers when the window opened (see above)."""
    if not any(tier.usage for tier in tiers):  # stored or being stored
        return "cold"
    bounded = [tier for tier in tiers if not math.isinf(tier.capacity)]
    if bounded and all(tier.usage >= STEADY_FILL * target_usage_ratio * tier.capacity
                       and tier.evicted_bytes >= tier.capacity for tier in bounded):
        return "steady"
    return "warm"


def reuse_rate(counters: dict[str, int]) -> float | None:
    """Reads of earlier KV that hit ÷ such reads: shared prefixes and a conversation's previous turn
    (multi-turn reuse is prefix reuse of the whole earlier context).  None when neither was read."""
    reads = counters.get("prefix_reads", 0) + counters.get("turn_reads", 0)
    if not reads:
        return None
    return round((counters.get("prefix_hits", 0) + counters.get("turn_hits", 0)) / reads, 6)
