"""One time-series interval: what it accumulates while open and the point it becomes when it closes.

A point carries its counts (requests, tokens, bytes) and the rates over its own length, so a merge adds
counts and divides once, never adds rates measured over different lengths.  Its latency percentiles are
over what it booked while open; its bytes are the device's, by time (``Telemetry._book_command``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.records import SERIES_COUNTS, series_rates


def new_interval(start: float, qos_classes: list[str]) -> dict[str, Any]:
    """An open interval from ``start``: its counts, its latency histograms, per tier [bytes, histogram]."""
    return {"start": start,
            "requests": 0, "generated_tokens": 0, "context_tokens": 0, "read_bytes": 0, "write_bytes": 0,
            "e2e": {q: LatencyHistogram() for q in qos_classes},
            "service": {q: LatencyHistogram() for q in qos_classes}, "storage": LatencyHistogram(),
            "tiers": defaultdict(lambda: {"read": [0, LatencyHistogram()], "write": [0, LatencyHistogram()]})}


def interval_point(interval: dict[str, Any], now: float, window_start: float, users: int,
                   extra: dict[str, Any] | None) -> dict[str, Any]:
    """The point of ``interval`` closed at ``now`` (``t_s`` from the window's start)."""
    span = max(now - interval["start"], 1e-9)
    counts = {name: interval[name] for name in SERIES_COUNTS}
    return {
        "t_s": round(now - window_start, 3),
        "interval_s": round(span, 3),
        "users": users,
        **counts,
        **series_rates(counts, span),
        "e2e_p95_ms": {q: ms(h.quantile(0.95)) for q, h in interval["e2e"].items() if h.count},
        "e2e_p99_ms": {q: ms(h.quantile(0.99)) for q, h in interval["e2e"].items() if h.count},
        "service_p95_ms": {q: ms(h.quantile(0.95)) for q, h in interval["service"].items() if h.count},
        "service_p99_ms": {q: ms(h.quantile(0.99)) for q, h in interval["service"].items() if h.count},
        "storage_p95_ms": ms(interval["storage"].quantile(0.95)),
        "tiers": {name: {f"{op}_{figure}": value for op, (nbytes, hist) in ops.items()
                         for figure, value in (("bytes", nbytes), ("bytes_per_s", nbytes / span),
                                               ("p95_ms", ms(hist.quantile(0.95)) if hist.count else None))}
                  for name, ops in interval["tiers"].items()},
        **(extra or {}),
    }


def add_to_point(point: dict[str, Any], tier: str, op: str, nbytes: int) -> None:
    """``nbytes`` a tier's ``op`` moved inside a point already closed: its counts and rates follow."""
    name = f"{op}_bytes"
    point[name] += nbytes
    point[f"{name}_per_s"] = point[name] / max(point["interval_s"], 1e-9)
    row = point.setdefault("tiers", {}).setdefault(tier, {})
    row[name] = row.get(name, 0) + nbytes
    row[f"{name}_per_s"] = row[name] / max(point["interval_s"], 1e-9)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 4)
