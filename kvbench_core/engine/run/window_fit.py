"""Whether a spec's requests can finish inside its measured window: the dry run's warning (issue #28 §2).

A 3-8 s window over a slow tier with multi-GiB requests completes no request at all, and a run whose window
completes fewer than 20 ends ``inconclusive`` (results/status.py).  Both can be seen before the run, from
the drawn requests' bytes and a nominal bandwidth per tier kind.  The nominal figures are optimistic on
purpose (an interface's ceiling, not a typical device), so a warning means the run cannot do better, never
that it might: when even those speeds cannot finish a request, the window is too short for the spec.

The model (docs/cli.md, "the dry run's window warning"): a request moves its KV entry and its reads
through the first enabled tier that admits the entry (the large-entry rule, runspec/bounds.admits), the
fastest place the waterfall would put it; the tiers work in parallel, each at its nominal bandwidth, and
requests share a tier's bandwidth however many are in flight.  Generation pacing and think time are left
out, so this is storage's share alone.  Backends not in the table (a vendor's plugin) give no estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbench_core.contracts.units import format_bytes
from kvbench_core.runspec.bounds import admits
from kvbench_core.runspec.plan import RunPlan, TierPlan

#: Bytes per second a tier kind moves at best: the interface's ceiling (DRAM copy, PCIe 5 GPU, PCIe 4 x4
#: NVMe, a 10 GbE link for network tiers).
NOMINAL_BYTES_PER_S = {"cpu": 20e9, "gpu": 50e9, "nvme": 7e9, "gds": 7e9, "nixl": 7e9,
                       "redis": 1.25e9, "s3": 1.25e9}
#: Fewer completed requests than this and the run is inconclusive (results/status.py MIN_REQUESTS_FOR_P95:
#: engine/ may not import results/, so the figure is restated here and a test holds the two equal).
REQUESTS_FOR_P95 = 20


def _landing_tier(plan: RunPlan, entry_bytes: float) -> TierPlan | None:
    """The first enabled tier that admits an entry of ``entry_bytes`` (``capacity: auto`` is taken to)."""
    ratio = float(plan.eviction["large_entry_limit_ratio"])
    for tier in plan.enabled_tiers:
        if not isinstance(tier.capacity, int | float) or admits(tier.capacity, entry_bytes, ratio):
            return tier
    return None


def window_fit_warnings(plan: RunPlan, requests: Sequence[tuple[float, float]], whose: str) -> list[str]:
    """Warnings for a duration-bound plan whose ``requests`` ((entry bytes, read bytes) each, as drawn)
    cannot finish inside the window at the tiers' nominal speeds: the largest request alone, and the most
    requests the window could complete when that is fewer than a p95 needs."""
    duration = plan.window.duration_s
    if not duration or not requests:
        return []
    busy: dict[str, float] = {}  # seconds of nominal tier time the drawn requests need, by tier
    slowest: tuple[float, float, TierPlan] | None = None
    for entry, read in requests:
        tier = _landing_tier(plan, entry)
        speed = NOMINAL_BYTES_PER_S.get(tier.backend.name) if tier else None
        if tier is None or speed is None:
            return []  # a tier this table does not know: no estimate rather than a wrong one
        seconds = (entry + read) / speed
        busy[tier.name] = busy.get(tier.name, 0.0) + seconds
        if slowest is None or seconds > slowest[0]:
            slowest = (seconds, entry + read, tier)
    warnings = []
    assert slowest is not None
    seconds, moved, tier = slowest
    if seconds > duration:
        warnings.append(f"window: the largest of {whose} moves {format_bytes(moved)}; at {tier.field} '{tier.name}' "
                        f"({tier.backend.name})'s nominal {NOMINAL_BYTES_PER_S[tier.backend.name] / 1e9:g} GB/s "
                        f"that is {seconds:.1f} s alone, longer than the {duration:g} s window: it cannot finish "
                        "inside it (lengthen duration or shorten the contexts)")
    # Tiers in parallel: the busiest one bounds how many requests of this mix the window can complete.
    most = int(duration * len(requests) / max(busy.values()))
    if most < REQUESTS_FOR_P95:
        warnings.append(f"window: at the tiers' nominal speeds the {duration:g} s window completes at most {most} "
                        f"requests of this mix, and a p95 needs {REQUESTS_FOR_P95}: the run would end "
                        "inconclusive (exit 7); lengthen duration")
    return warnings
