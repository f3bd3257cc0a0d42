"""Every number in a spec bounded to what it can mean on a real machine, and memory tiers bounded by the
memory they can have.

The schema caps numbers given as numbers; a size or duration given as a string (``"99999TiB"``,
``"9999999h"``) is only known once parsed, so ``check_parsed_bounds`` caps those with the same figures.
A limit is generous (an exabyte-scale cluster still fits) but finite: past it a value is a typo or an
attack, and accepting it means an OOM kill, an overflow or a run that never ends.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import format_bytes, parse_duration, parse_size

#: Largest size anywhere in a spec: 8 PiB (2**53 B, the largest byte count a float holds exactly).
MAX_BYTES = 1 << 53
#: Longest duration anywhere in a spec: 30 days.
MAX_SECONDS = 30 * 86400
#: Most timeseries samples a run may ask for (duration / output.interval): ~10 MB of result at most.
MAX_SAMPLES = 100_000
#: Shortest timeseries interval: below 10 ms the sampler measures itself.
MIN_INTERVAL_S = 0.01


def _sizes(raw: dict[str, Any]) -> list[tuple[str, Any]]:
    fields = [(f"cache.tiers[{i}].capacity", tier.get("capacity")) for i, tier in enumerate(raw["cache"]["tiers"])]
    pre = raw.get("precondition") or {}
    fields += [("precondition.size", pre.get("size")), ("precondition.entry_size", pre.get("entry_size"))]
    return [(field, value) for field, value in fields if value is not None and value != "auto"]


def _durations(raw: dict[str, Any]) -> list[tuple[str, Any]]:
    fields = [(key, raw.get(key)) for key in ("duration", "warmup", "trial_pause")]
    fields += [(f"cache.tiers[{i}].cold_after", tier.get("cold_after")) for i, tier in enumerate(raw["cache"]["tiers"])]
    return [(field, value) for field, value in fields if value is not None]


def check_parsed_bounds(raw: dict[str, Any]) -> None:
    """Sizes and durations written as strings within the schema's limits; the sampling rate bounded."""
    for field, value in _sizes(raw):
        if parse_size(value) > MAX_BYTES:
            raise SpecError(f"{field}: expected a size <= 8 PiB, got {value!r}")
    for field, value in _durations(raw):
        if parse_duration(value) > MAX_SECONDS:
            raise SpecError(f"{field}: expected a duration <= 30 days ({MAX_SECONDS} s), got {value!r}")
    interval = (raw.get("output") or {}).get("interval")
    duration = raw.get("duration")
    if interval is not None and duration is not None and parse_duration(duration) / interval > MAX_SAMPLES:
        raise SpecError(f"output.interval: {interval} s over a {parse_duration(duration):g} s run is "
                        f"{parse_duration(duration) / interval:,.0f} samples; at most {MAX_SAMPLES:,} "
                        f"(use an interval >= {parse_duration(duration) / MAX_SAMPLES:g} s)")


def check_memory_tiers(raw: dict[str, Any]) -> None:
    """A DRAM or GPU tier no larger than the memory it can have, found out before the run instead of by
    the OOM killer (exit 137, no result).  DRAM tiers of every local client process add up."""
    from kvbench_core.contracts.plugins import lookup
    from kvbench_core.contracts.validation import with_defaults
    from kvbench_core.runspec.memlimit import gpu_memory_limit

    tiers = [(i, tier) for i, tier in enumerate(raw["cache"]["tiers"])
             if tier.get("capacity", "auto") != "auto" and parse_size(tier["capacity"]) > 0]
    dram = [(i, parse_size(tier["capacity"])) for i, tier in tiers if tier["backend"] == "cpu"]
    if dram:
        _check_dram(dram, raw.get("clients", 1))
    for i, tier in tiers:
        if tier["backend"] != "gpu":
            continue
        gpu = lookup("backend", "gpu", path=f"cache.tiers[{i}].backend")
        device = with_defaults(gpu.options_schema, tier.get("options") or {})["device"]  # its default, once
        limit = gpu_memory_limit(device)
        if limit is not None and parse_size(tier["capacity"]) > limit.nbytes:
            raise SpecError(f"cache.tiers[{i}].capacity: {format_bytes(parse_size(tier['capacity']))} is more "
                            f"than the GPU can give: {limit.reason}; lower it or use capacity: auto")


def _check_dram(dram: list[tuple[int, int]], clients: int) -> None:
    """The DRAM tiers ``(index, bytes)`` of every local client together, against what the host can give."""
    from kvbench_core.runspec.memlimit import host_memory_limit

    wanted = sum(size for _, size in dram) * clients
    limit = host_memory_limit()
    if limit is not None and wanted > limit.nbytes:
        first = dram[0][0]
        what = f"{format_bytes(wanted)} of DRAM tiers" + (f" ({clients} clients)" if clients > 1 else "")
        raise SpecError(f"cache.tiers[{first}].capacity: {what} is more than this machine can give: "
                        f"{limit.reason}; lower the capacity or use capacity: auto")


def admits(capacity: float, size: float, large_entry_limit_ratio: float) -> bool:
    """The large-entry rule (the seed's): an entry above ``large_entry_limit_ratio`` of a tier's capacity
    skips that tier.  One rule for the cache's placement, the load-time refusal and the dry run's warning."""
    return size <= capacity * large_entry_limit_ratio


def check_an_entry_fits(capacities: list[tuple[str, float]], bytes_per_token: int,
                        large_entry_limit_ratio: float) -> None:
    """Refuse a run in which no tier can hold even a one-token entry: every KV write would fail.
    ``capacities`` are the enabled tiers' ``(name, bytes)``.  Judged when the spec loads, where every
    capacity is declared (so ``--dry-run`` refuses what the run would, and no result is written for it),
    and again once ``capacity: auto`` tiers have opened and said how much they hold."""
    smallest = max(1, bytes_per_token)
    if not capacities or any(admits(capacity, smallest, large_entry_limit_ratio) for _, capacity in capacities):
        return
    name, largest = max(capacities, key=lambda item: item[1])
    held = "unbounded" if largest == float("inf") else f"{int(largest)} bytes"
    raise SpecError(f"cache.tiers: no tier can hold one entry: a single token of this model is {smallest} bytes "
                    f"of KV, the largest tier ('{name}') holds {held} "
                    f"(entries above {large_entry_limit_ratio:.0%} of a tier skip it); give a tier more capacity")
