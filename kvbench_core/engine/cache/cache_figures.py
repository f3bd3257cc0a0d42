"""Figures about the cache's state that the declaration reports: cache state and prefix reuse.

``cache_state`` (the declaration's cold / warm / steady-state condition):

- ``cold``: the measured window opened on an empty cache;
- ``warm``: it opened on a cache holding entries (warm-up requests, a decode-only or RAG population) but
  with room left in some bounded tier, so hit rates and the tier distribution still drift as it fills;
- ``steady``: every bounded tier had turned over when the window opened, and was full:
  evictions run through the whole window and no entry left from the filling-up remains, so what is
  measured is the cache's steady state.

  *Turned over*: the bytes that left the tier since the run began (evicted to make room, or demoted
  cold) are at least its capacity.  *Full* allows the eviction sawtooth: room is made only until the new
  entry fits, so a full tier sits anywhere between its eviction target (``capacity x
  target_usage_ratio``) and the target less the largest entry it has taken (the last victim may have
  been that large, and is gone).  A fixed fraction of the target (the first rule) judged a full 16 MiB
  tier of 1.5 MiB entries warm or steady by where in the sawtooth the window happened to open.

  A tier the tier below drains by idle time (its ``cold_after``) is held at a level its traffic and the
  timer set, not at its target: for it, full is waived and turned over means the bytes that left it
  reach what it holds.  A bounded tier that never fills (the working set fits) leaves the cache
  ``warm``: at the instant the window opens, a tier that has stopped filling cannot be told from one
  still filling, and ``steady`` is claimed only when it can be shown.
"""

from __future__ import annotations

import math

from kvbench_core.engine.cache.cache_types import Tier


def cache_state_at_open(tiers: list[Tier], target_usage_ratio: float) -> str:
    """``cold`` / ``warm`` / ``steady`` from the tiers when the window opened (see above)."""
    if not any(tier.usage for tier in tiers):  # stored or being stored
        return "cold"
    drained = [below.cold_after is not None for below in tiers[1:]] + [False]
    bounded = [(tier, timed) for tier, timed in zip(tiers, drained, strict=True) if not math.isinf(tier.capacity)]
    if bounded and all(_turned_over_and_full(tier, target_usage_ratio, timed) for tier, timed in bounded):
        return "steady"
    return "warm"


def _turned_over_and_full(tier: Tier, target_usage_ratio: float, drained_by_idle_time: bool) -> bool:
    """Turned over and full, up to the eviction sawtooth; a tier drained by idle time: turned over only."""
    if drained_by_idle_time:
        return tier.evicted_bytes >= max(tier.usage, 1)  # something left it, at least what it holds
    return (tier.evicted_bytes >= tier.capacity
            and tier.usage + tier.largest_entry >= target_usage_ratio * tier.capacity)


def reuse_rate(counters: dict[str, int]) -> float | None:
    """Reads of earlier KV that hit ÷ such reads: shared prefixes and a conversation's previous turn
    (multi-turn reuse is prefix reuse of the whole earlier context).  None when neither was read."""
    reads = counters.get("prefix_reads", 0) + counters.get("turn_reads", 0)
    if not reads:
        return None
    return round((counters.get("prefix_hits", 0) + counters.get("turn_hits", 0)) / reads, 6)
