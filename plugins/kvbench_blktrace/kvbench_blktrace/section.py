"""Turn bpftrace's maps into the result's ``block_trace`` section (format: docs/block-trace.md).

Histograms keep their buckets (so a report can draw them and runs can be
compared bucket by bucket) and gain a count and percentiles.  bpftrace's
buckets are log2 (latencies) or unit-wide (queue depth); a percentile is
interpolated linearly inside its bucket, so for log2 buckets it is an
estimate within that bucket's bounds, stated as such in the section.
"""

from __future__ import annotations

from typing import Any

from kvbench_blktrace.parse import Bucket, Value
from kvbench_blktrace.program import COUNTERS, HISTOGRAMS, LBA_BUCKET_BYTES, LBA_MAPS, SIZE_MAPS

SECTION_FORMAT = 1
PERCENTILES = (50, 90, 95, 99)


def quantile(buckets: list[Bucket], q: float) -> float | None:
    """Value at quantile ``q`` (0..1), interpolated inside the bucket holding that rank."""
    total = sum(bucket.count for bucket in buckets)
    if total == 0:
        return None
    target = q * total
    seen = 0
    for bucket in buckets:
        if bucket.count and seen + bucket.count >= target:
            if bucket.low is None or bucket.high is None:  # open-ended: only the finite bound is known
                return float(bucket.low if bucket.low is not None else bucket.high)
            return bucket.low + (target - seen) / bucket.count * (bucket.high - bucket.low)
        seen += bucket.count
    last = next(bucket for bucket in reversed(buckets) if bucket.count)
    return float(last.high if last.high is not None else last.low)


def histogram_entry(name: str, buckets: list[Bucket]) -> dict[str, Any]:
    info = HISTOGRAMS[name]
    filled = [bucket for bucket in buckets if bucket.count]
    entry: dict[str, Any] = {"layer": info.layer, "unit": info.unit, "what": info.what,
                             "count": sum(bucket.count for bucket in buckets)}
    for p in PERCENTILES:
        value = quantile(buckets, p / 100)
        entry[f"p{p}"] = None if value is None else round(value, 3)
    entry["max_bucket"] = ([filled[-1].low, filled[-1].high] if filled else None)
    entry["buckets"] = [{"low": b.low, "high": b.high, "count": b.count} for b in buckets]
    return entry


def _counts(table: Value | None, field: str) -> list[dict[str, int]]:
    """A ``@name[number]: count`` map as ``[{field: number, "count": count}]`` in key order."""
    if not isinstance(table, dict):
        return []
    return [{field: key, "count": count} for key, count in sorted((int(k), v) for k, v in table.items())]


def lba_heatmap(maps: dict[str, Value]) -> dict[str, Any]:
    """Requests per ``LBA_BUCKET_BYTES`` stretch of the disk (from its first sector), per op."""
    heat: dict[str, Any] = {"bucket_bytes": LBA_BUCKET_BYTES}
    for name, op in LBA_MAPS.items():
        heat[op] = [{"offset_bytes": entry["bucket"] * LBA_BUCKET_BYTES, "count": entry["count"]}
                    for entry in _counts(maps.get(name), "bucket")]
    return heat


def build_section(maps: dict[str, Value], *, tool: str, pid: int, devices: list[dict[str, str]],
                  paths: dict[str, str], window: dict[str, Any], l4: dict[str, Any],
                  notes: list[str]) -> dict[str, Any]:
    """The ``block_trace`` result section from parsed maps and what the trace was pointed at."""
    histograms = {}
    for name in HISTOGRAMS:
        buckets = maps.get(name)
        histograms[name] = histogram_entry(name, buckets if isinstance(buckets, list) else [])
    bssplit = {op: _counts(maps.get(name), "bytes") for name, op in SIZE_MAPS.items()}
    totals: dict[str, Any] = {op: {"ios": sum(s["count"] for s in sizes),
                                   "bytes": sum(s["bytes"] * s["count"] for s in sizes)}
                              for op, sizes in bssplit.items()}
    for counter in COUNTERS:
        value = maps.get(counter, 0)
        totals[counter] = value if isinstance(value, int) else 0
    return {
        "format": SECTION_FORMAT,
        "tool": tool,
        "pid": pid,
        "devices": devices,
        "paths": paths,
        "window": window,
        "percentiles": "interpolated inside bpftrace's buckets (log2 for latencies: an estimate within the bucket)",
        "totals": totals,
        "histograms": histograms,
        "bssplit": bssplit,
        "lba_heatmap": lba_heatmap(maps),
        "l4": l4,
        "notes": notes,
    }
