"""The key figures of a result: the MLPerf headline plus a few per-tier numbers.

One list, used by trials (statistics per figure), ``kvbench compare`` (side
by side, ratios) and the comparison workbook (one row per run), so the three
always talk about the same numbers under the same names.  A trials summary
carries the figures' statistics; ``figure_values`` reads either kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    key: str  # "decode_bytes_read_gb", or "<tier>.<figure>" for per-tier figures
    label: str
    unit: str
    better: str  # "higher" | "lower": which way a ratio is an improvement


@dataclass(frozen=True)
class FigureValue:
    """A figure's value in one result; for a trials summary the median with the trials' min and max."""

    figure: Figure
    value: float | None
    low: float | None = None
    high: float | None = None
    trials: int = 0


#: metrics.headline names (seed §6, §7) and metrics.latency_ms.storage (seed §5.2's "Storage Latency P95")
HEADLINE = (
    Figure("decode_bytes_read_gb", "Decode bytes read", "GB", "higher"),
    Figure("avg_throughput_tokens_per_sec", "Wall-clock throughput", "tok/s", "higher"),
    Figure("storage_throughput_tokens_per_sec", "Storage throughput", "tok/s", "higher"),
    Figure("nvme_read_device_p95_ms", "Storage read device P95", "ms", "lower"),
    Figure("nvme_write_device_p95_ms", "Storage write device P95", "ms", "lower"),
    Figure("end_to_end_latency_p95_ms", "End-to-end latency P95", "ms", "lower"),
    Figure("cache_hit_rate", "Cache hit rate", "", "higher"),
    Figure("requests_completed", "Requests completed", "", "higher"),
)
STORAGE_P95 = Figure("storage_latency_p95_ms", "Storage latency P95", "ms", "lower")


def _bandwidth(op: str) -> Callable[[dict[str, Any]], float | None]:
    def get(tier: dict[str, Any]) -> float | None:
        value = tier[op]["bandwidth_bytes_per_s"]
        return None if value is None else value / 1e9
    return get


def _p95(op: str, layer: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda tier: tier[op]["latency_ms"][layer]["p95"]


#: (suffix, label, unit, better, getter on metrics.tiers.<tier>)
TIER_FIGURES: tuple[tuple[str, str, str, str, Callable[[dict[str, Any]], float | None]], ...] = (
    ("read_gb_s", "read bandwidth", "GB/s", "higher", _bandwidth("read")),
    ("write_gb_s", "write bandwidth", "GB/s", "higher", _bandwidth("write")),
    ("read_p95_ms", "read P95", "ms", "lower", _p95("read", "total")),
    ("read_device_p95_ms", "read device P95", "ms", "lower", _p95("read", "device")),
    ("write_p95_ms", "write P95", "ms", "lower", _p95("write", "total")),
    ("write_device_p95_ms", "write device P95", "ms", "lower", _p95("write", "device")),
)


def measured_figures(result: dict[str, Any]) -> dict[str, FigureValue]:
    """The key figures of one run's result (not a trials summary), in display order."""
    metrics = result.get("metrics") or {}
    head = metrics.get("headline") or {}
    out = {f.key: FigureValue(f, head.get(f.key)) for f in HEADLINE}
    out[STORAGE_P95.key] = FigureValue(STORAGE_P95, (metrics.get("latency_ms") or {}).get("storage", {}).get("p95"))
    for tier_name, tier in (metrics.get("tiers") or {}).items():
        for suffix, label, unit, better, get in TIER_FIGURES:
            figure = Figure(f"{tier_name}.{suffix}", f"{tier_name} {label}", unit, better)
            out[figure.key] = FigureValue(figure, get(tier))
    return out


def figure_values(result: dict[str, Any]) -> dict[str, FigureValue]:
    """Key figures of a run, or of a trials summary (median, with the trials' range)."""
    trials = result.get("trials")
    if not trials:
        return measured_figures(result)
    return {key: FigureValue(Figure(key, stats["label"], stats["unit"], stats["better"]), stats["median"],
                             stats["min"], stats["max"], len([v for v in stats["values"] if v is not None]))
            for key, stats in trials["metrics"].items()}
