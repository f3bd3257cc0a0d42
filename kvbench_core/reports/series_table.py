"""A result's time series as a table: one row per interval, one column per figure, units in the headers.

The workbook's Timeseries sheet writes it; the columns are found from the
points themselves (the tiers, QoS classes and occupied tiers any point
names), so a merged or an older series gets the columns it has.  Rates are
in GB/s (10^9 bytes), occupancy in GB, latencies in ms, as the JSON's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GB = 1e9
OPS = ("read", "write")
Point = dict[str, Any]
Column = tuple[str, Callable[[Point], Any]]


def series_table(series: list[Point]) -> tuple[list[str], list[list[Any]]]:
    """``(headers, rows)`` of ``series``."""
    columns = series_columns(series)
    return [header for header, _ in columns], [[get(point) for _, get in columns] for point in series]


def series_columns(series: list[Point]) -> list[Column]:
    """Every column: the run's figures, then per tier its bandwidths and p95s, the storage p95 and queue,
    per QoS class its end-to-end p95, per tier its occupancy."""
    classes = _names(series, "e2e_p95_ms")
    occupied = _names(series, "occupancy")
    tiers = sorted(_names(series, "tiers"), key=lambda t: occupied.index(t) if t in occupied else len(occupied))
    return [*_run_columns(series), *_tier_columns(tiers),
            ("storage p95 ms", _point("storage_p95_ms")), ("queue", _point("queue")),
            *((f"e2e p95 {q} ms", _within("e2e_p95_ms", q)) for q in classes),
            *((f"{t} occupancy GB", _within("occupancy", t, "bytes", GB)) for t in occupied)]


def _names(series: list[Point], section: str) -> list[str]:
    """The keys any point's ``section`` has, in the order they first appear."""
    return list(dict.fromkeys(name for point in series for name in point.get(section) or {}))


def _run_columns(series: list[Point]) -> list[Column]:
    # A series from before generation was split names its rate tokens_per_s.
    tokens = "generated_tokens_per_s" if any("generated_tokens_per_s" in p for p in series) else "tokens_per_s"
    return [("t s", _point("t_s")), ("interval s", _point("interval_s")), ("users", _point("users")),
            ("requests", _point("requests")), (tokens.removesuffix("_per_s").replace("_", " ") + "/s", _point(tokens)),
            ("read GB/s", _point("read_bytes_per_s", GB)), ("write GB/s", _point("write_bytes_per_s", GB))]


def _tier_columns(tiers: list[str]) -> list[Column]:
    bandwidth = [(f"{t} {op} GB/s", _within("tiers", t, f"{op}_bytes_per_s", GB)) for t in tiers for op in OPS]
    p95 = [(f"{t} {op} p95 ms", _within("tiers", t, f"{op}_p95_ms")) for t in tiers for op in OPS]
    return [*bandwidth, *p95]


def _point(key: str, scale: float = 1.0) -> Callable[[Point], Any]:
    """A point's figure ``key``; a rate over ``scale`` is 0 where the point has none."""
    if scale == 1.0:
        return lambda point: point.get(key)
    return lambda point: (point.get(key) or 0) / scale


def _within(section: str, name: str, key: str | None = None, scale: float = 1.0) -> Callable[[Point], Any]:
    """``point[section][name]`` (a class's p95), or ``[key]`` of it (a tier's figure), over ``scale``."""
    def get(point: Point) -> Any:
        value = (point.get(section) or {}).get(name)
        if key is not None:
            value = (value or {}).get(key)
        return value if scale == 1.0 else (value or 0) / scale
    return get
