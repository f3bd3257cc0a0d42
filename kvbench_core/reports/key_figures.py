"""The key figures of a result: the MLPerf headline plus a few per-tier numbers.

One list, used by trials (statistics per figure), ``kvbench compare`` (side
by side, ratios) and the comparison workbook (one row per run), so the three
always talk about the same numbers under the same names.  A trials summary
carries the figures' statistics; ``figure_values`` reads either kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvbench_core.results.document import ResultDocument
from kvbench_core.results.metrics import OPS, persistent_tier


@dataclass(frozen=True)
class Figure:
    key: str  # "decode_bytes_read_gb", or "<tier>.<figure>" for per-tier figures
    label: str
    unit: str
    better: str  # "higher" | "lower": which way a ratio is an improvement
    definition: str = ""  # one line, as docs/metrics.md defines it (the HTML report shows it beside the value)


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
    Figure("decode_bytes_read_gb", "Decode bytes read", "GB", "higher",
           "bytes read by decode-batch reads (10^9 bytes); each reads the request's whole KV"),
    Figure("avg_throughput_tokens_per_sec", "Wall-clock throughput", "tok/s", "higher",
           "generated tokens / the measured wall-clock window"),
    Figure("storage_throughput_tokens_per_sec", "Storage throughput", "tok/s", "higher",
           "generated tokens / the sum of per-request storage time (L2)"),
    Figure("nvme_read_device_p95_ms", "Storage read device P95", "ms", "lower",
           "the seed's read device p95 (np.load: the file's read and its deserialisation): the whole read (L3) "
           "on the first persistent tier"),
    Figure("nvme_read_device_only_p95_ms", "Storage read device-only P95", "ms", "lower",
           "device p95 (L4) of reads on the first persistent tier: nvme's syscalls alone"),
    Figure("nvme_write_device_p95_ms", "Storage write device P95", "ms", "lower",
           "device p95 (L4) of writes on the first persistent tier (the seed's flush + fsync)"),
    Figure("nvme_tokens_processed", "Tokens through storage", "", "higher",
           "tokens' bytes the first persistent tier read and wrote for the window's requests / bytes per token"),
    Figure("end_to_end_latency_p95_ms", "End-to-end latency P95", "ms", "lower",
           "request enqueued to response complete (L1), p95 over all QoS classes"),
    Figure("cache_hit_rate", "Cache hit rate", "", "higher",
           "reads served by memory tiers (GPU/DRAM) / all reads, misses included"),
    Figure("requests_completed", "Requests completed", "", "higher",
           "requests finished inside the measured window"),
)
STORAGE_P95 = Figure("storage_latency_p95_ms", "Storage latency P95", "ms", "lower")
PEAK_IO = Figure("peak_io_bandwidth_gb_s", "Peak I/O bandwidth", "GB/s", "higher",
                 "the persistent tier's highest read + write GB/s over the time series' intervals")
#: The headline figures that are the first persistent tier's: their labels name it.
PERSISTENT_FIGURES = frozenset({"nvme_read_device_p95_ms", "nvme_read_device_only_p95_ms",
                                "nvme_write_device_p95_ms", "nvme_tokens_processed"})


def _bandwidth(op: str) -> Callable[[Mapping[str, Any]], float | None]:
    def get(tier: Mapping[str, Any]) -> float | None:
        value = tier[op]["bandwidth_bytes_per_s"]
        return None if value is None else value / 1e9
    return get


def _p95(op: str, layer: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda tier: tier[op]["latency_ms"][layer]["p95"]


#: (suffix, label, unit, better, getter on metrics.tiers.<tier>)
TIER_FIGURES: tuple[tuple[str, str, str, str, Callable[[Mapping[str, Any]], float | None]], ...] = (
    ("read_gb_s", "read bandwidth", "GB/s", "higher", _bandwidth("read")),
    ("write_gb_s", "write bandwidth", "GB/s", "higher", _bandwidth("write")),
    ("read_p95_ms", "read P95", "ms", "lower", _p95("read", "total")),
    ("read_device_p95_ms", "read device P95", "ms", "lower", _p95("read", "device")),
    ("write_p95_ms", "write P95", "ms", "lower", _p95("write", "total")),
    ("write_device_p95_ms", "write device P95", "ms", "lower", _p95("write", "device")),
)


def peak_io_bandwidth(document: ResultDocument) -> float | None:
    """The seed's "Peak I/O Bandwidth": the highest read + write bytes per second of the persistent tier over
    the time series' intervals (its device's bytes, booked by time; a merged result's grid sums the clients),
    so it is at least the tier's mean over the window.  None without a persistent tier or a series."""
    tier = persistent_tier(dict(document.tiers))
    rates = [sum(((point.get("tiers") or {}).get(tier) or {}).get(f"{op}_bytes", 0) for op in OPS)
             / point["interval_s"] for point in document.series if point.get("interval_s")]
    return max(rates) if tier and rates else None


def measured_figures(document: ResultDocument) -> dict[str, FigureValue]:
    """The key figures of one run's result (not a trials summary), in display order."""
    head = document.headline
    tier = head.get("persistent_tier")
    out = {f.key: FigureValue(dataclasses.replace(f, label=f"{f.label} ({tier})")
                              if tier and f.key in PERSISTENT_FIGURES else f, head.get(f.key)) for f in HEADLINE}
    out[STORAGE_P95.key] = FigureValue(STORAGE_P95, document.request_latency.get("storage", {}).get("p95"))
    peak = peak_io_bandwidth(document)
    out[PEAK_IO.key] = FigureValue(dataclasses.replace(PEAK_IO, label=f"{PEAK_IO.label} ({tier})") if tier
                                   else PEAK_IO, None if peak is None else peak / 1e9)
    for tier_name, tier in document.tiers.items():
        for suffix, label, unit, better, get in TIER_FIGURES:
            figure = Figure(f"{tier_name}.{suffix}", f"{tier_name} {label}", unit, better)
            out[figure.key] = FigureValue(figure, get(tier))
    return out


def figure_values(document: ResultDocument) -> dict[str, FigureValue]:
    """Key figures of a run, or of a trials summary (median, with the trials' range)."""
    trials = document.trials
    if not trials:
        return measured_figures(document)
    return {key: FigureValue(Figure(key, stats["label"], stats["unit"], stats["better"]), stats["median"],
                             stats["min"], stats["max"], len([v for v in stats["values"] if v is not None]))
            for key, stats in trials.metrics.items()}


def op_figures(tier: Mapping[str, Any], op: str) -> dict[str, float | None]:
    """One tier operation's table figures, in the units the reports name: capacity in GiB (2^30), the device's
    bytes in the window (booked by time) in GB and bandwidth in GB/s (10^9), IOPS = the window's requests'
    entry operations per second of the op's active window (first
    start to last end, the same window as the bandwidth), device commands per second likewise; a shared
    tier's stores without a transfer (``dedup_stores``, ``dedup_bytes``: docs/metrics.md) beside them,
    in no other figure."""
    stats = tier[op]
    window = stats.get("active_window_s") or 0.0
    capacity = tier.get("capacity_bytes")
    bandwidth = stats.get("bandwidth_bytes_per_s")
    return {"capacity_gib": None if capacity is None else capacity / (1 << 30), "ops": stats.get("ops", 0),
            "iops": stats.get("ops", 0) / window if window else None, "commands": stats.get("commands"),
            "commands_per_s": (stats.get("commands") or 0) / window if window else None,
            "gb": ((stats.get("device") or {}).get("window") or {}).get("bytes", stats.get("bytes", 0)) / 1e9,
            "bandwidth_gb_s": None if bandwidth is None else bandwidth / 1e9,
            "active_window_s": window, "errors": stats.get("errors"),
            "dedup_stores": stats.get("dedup_stores", 0), "dedup_gb": stats.get("dedup_bytes", 0) / 1e9}
