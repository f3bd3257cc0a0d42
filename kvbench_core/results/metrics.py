"""The metrics of a run as one typed model: built from telemetry, merged across clients, rendered once.

``Metrics`` holds what can be added up exactly (counts, bytes, mergeable
latency histograms, per-tier operation stats, the window's ends); every
figure derived from them (percentiles, bandwidths, rates, hit rates, SLA
verdicts, the MLPerf headline, CPU per GB) is computed in one place,
``to_json``.  A single run renders ``Metrics.from_telemetry(state)``; a
multi-client or MPI run renders ``Metrics.merge([Metrics.from_json(...)
for each client])``; so a figure is spelled out once and means the same in
both (docs/metrics.md defines each; docs/results.md lays out the JSON).

Merging: counts, bytes and times add up; histograms merge bucket by bucket
(never by averaging percentiles); the window runs from the earliest client
start to the latest end on the wall clock, and each client's tier
timestamps are converted to the wall clock with its own measurement start,
so a bandwidth is summed bytes over the union of the clients' I/O windows.
"""

from __future__ import annotations

import copy
import math
import resource
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.redact import environment_secrets, redact
from kvbench_core.contracts.workload import DEFAULT_QOS, QoSClass
from kvbench_core.engine.measure.cancel import CommandRecorder
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.opstats import OpStats
from kvbench_core.engine.measure.records import PHASES, DeviceStats
from kvbench_core.engine.run.runner import RunState
from kvbench_core.results.tier_metrics import OPS, TierMetrics, sum_dicts

GB = 1e9
MAX_LISTED = 100
#: The request counts a run reports (``metrics.requests``); all add up across clients.
REQUEST_COUNTS = ("completed", "failed", "write_failed", "unfinished", "context_tokens", "generated_tokens",
                  "decode_tokens_read")
#: The cache's own counts (``metrics.cache``); the rest of that section is derived from them.
CACHE_COUNTS = ("reads_served_by_tier", "read_misses", "demotions_bytes", "demotions_count", "evictions_deleted",
                "promotions", "counters", "occupancy_at_end")


@dataclass
class Metrics:
    """The mergeable measurements of one run (one client, or several merged)."""

    measured_s: float
    started_at: float | None
    ended_at: float | None
    monotonic_start: float | None  # the process's perf_counter at measurement start; None once merged
    requests: dict[str, int]
    end_to_end: LatencyHistogram
    queue_wait: LatencyHistogram
    storage: LatencyHistogram
    end_to_end_by_qos: dict[str, LatencyHistogram]
    service_by_qos: dict[str, LatencyHistogram]
    tiers: dict[str, TierMetrics]
    cache: dict[str, Any]  # CACHE_COUNTS
    drain: dict[str, Any]
    verify: dict[str, Any]  # enabled, bytes_verified, seconds, integrity_errors, mismatches
    process_cpu_s: float
    peak_rss_bytes: int
    bytes_per_token: int
    qos: dict[str, QoSClass] = field(default_factory=lambda: dict(DEFAULT_QOS))

    # -- building ------------------------------------------------------------------------------------
    @classmethod
    def from_telemetry(cls, state: RunState) -> Metrics:
        """The measurements of a run that has ended (its telemetry, tiers and window)."""
        telemetry = state.telemetry
        usage = resource.getrusage(resource.RUSAGE_SELF)
        window_s = ((state.measure_end or 0) - (state.measure_start or 0)) if state.measure_start else 0.0
        tiers = {}
        for tier in state.tiers:
            ops = telemetry.tiers[tier.name]
            recorder = tier.backend.context.io_log
            recorded = recorder.recorded if isinstance(recorder, CommandRecorder) else {}
            tiers[tier.name] = TierMetrics(
                tier.backend.name, None if math.isinf(tier.capacity) else int(tier.capacity), tier.backend.volatile,
                redact(tier.description or {"backend": tier.backend.name}, environment_secrets()),
                ops["read"], ops["write"], telemetry.read_hits.get(tier.name, 0),
                tier.backend.counters(),
                device={op: {phase: telemetry.device[phase][tier.name][op] for phase in PHASES} for op in OPS},
                moved={op: recorded.get(op, 0) + telemetry.uncommanded_bytes[tier.name][op] for op in OPS})
        return cls(
            measured_s=window_s, started_at=state.measure_start_wall, ended_at=state.measure_end_wall,
            monotonic_start=state.measure_start,
            requests={"completed": telemetry.requests, "failed": telemetry.requests_failed,
                      "write_failed": telemetry.requests_write_failed, "unfinished": state.unfinished_requests,
                      "context_tokens": telemetry.context_tokens, "generated_tokens": telemetry.generated_tokens,
                      "decode_tokens_read": telemetry.decode_tokens_read},
            end_to_end=telemetry.e2e_all, queue_wait=telemetry.queue_wait, storage=telemetry.storage,
            end_to_end_by_qos=dict(telemetry.e2e), service_by_qos=dict(telemetry.service), tiers=tiers,
            cache={"reads_served_by_tier": dict(telemetry.read_hits), "read_misses": telemetry.read_misses,
                   "demotions_bytes": dict(telemetry.demotions), "demotions_count": dict(telemetry.demotion_count),
                   "evictions_deleted": telemetry.evictions_deleted, "promotions": telemetry.promotions,
                   "counters": dict(telemetry.counters),
                   "occupancy_at_end": {name: {"entries": o["entries"], "bytes": o["bytes"]}  # read before cleanup
                                        for name, o in state.occupancy_at_end.items()}},
            drain=dict(state.drain),
            verify={"enabled": state.plan.verify, "bytes_verified": telemetry.verified_bytes,
                    "seconds": telemetry.verify_seconds,
                    "integrity_errors": telemetry.counters.get("integrity_errors", 0),
                    "mismatches": list(telemetry.integrity_errors)},
            process_cpu_s=usage.ru_utime + usage.ru_stime, peak_rss_bytes=usage.ru_maxrss * 1024,
            bytes_per_token=state.bytes_per_token, qos=dict(state.plan.qos))

    @classmethod
    def from_json(cls, metrics: dict[str, Any], *, bytes_per_token: int,
                  qos: dict[str, QoSClass] | None = None) -> Metrics:
        """A client's rendered metrics read back for merging; its tier timestamps move to the wall clock."""
        window = metrics["window"]

        def wall(monotonic: float | None) -> float | None:
            if monotonic is None or window.get("monotonic_start") is None or window["started_at"] is None:
                return monotonic
            return window["started_at"] + (monotonic - window["monotonic_start"])

        def stats(data: dict[str, Any]) -> OpStats:
            one = OpStats.from_dict(data)
            one.first_start, one.last_end = wall(one.first_start), wall(one.last_end)
            return one

        def device(data: dict[str, Any]) -> dict[str, DeviceStats]:
            phases = {phase: DeviceStats.from_dict((data.get("device") or {}).get(phase) or {}) for phase in PHASES}
            for one in phases.values():
                one.first_start, one.last_end = wall(one.first_start), wall(one.last_end)
            return phases

        hists = metrics["histograms"]
        return cls(
            measured_s=window["measured_s"], started_at=window["started_at"], ended_at=window["ended_at"],
            monotonic_start=None, requests={k: metrics["requests"].get(k, 0) for k in REQUEST_COUNTS},
            end_to_end=LatencyHistogram.from_dict(hists["end_to_end"]),
            queue_wait=LatencyHistogram.from_dict(hists["queue_wait"]),
            storage=LatencyHistogram.from_dict(hists["storage"]),
            end_to_end_by_qos={q: LatencyHistogram.from_dict(h) for q, h in hists["end_to_end_by_qos"].items()},
            service_by_qos={q: LatencyHistogram.from_dict(h) for q, h in hists["service_by_qos"].items()},
            tiers={name: TierMetrics(t["backend"], t["capacity_bytes"], t["volatile"], t["describe"],
                                     stats(t["read"]), stats(t["write"]), t["reads_served"], t.get("counters"),
                                     device={op: device(t[op]) for op in OPS},
                                     moved={op: (t[op].get("device") or {}).get("moved_bytes", 0) for op in OPS})
                   for name, t in metrics["tiers"].items()},
            cache={k: copy.deepcopy(metrics["cache"].get(k, {})) for k in CACHE_COUNTS},
            drain=copy.deepcopy(metrics.get("drain") or {}),
            verify=copy.deepcopy(metrics["verify"]), process_cpu_s=metrics["cpu"]["process_cpu_s"],
            peak_rss_bytes=metrics["cpu"]["peak_rss_bytes"], bytes_per_token=bytes_per_token,
            qos=qos or dict(DEFAULT_QOS))

    @classmethod
    def merge(cls, parts: list[Metrics]) -> Metrics:
        """One set of metrics for several clients (``parts`` read with ``from_json``, wall-clock times)."""
        first = parts[0]
        measured_s, started_at, ended_at = _union_window(parts)
        return cls(
            measured_s=measured_s, started_at=started_at, ended_at=ended_at, monotonic_start=None,
            requests={k: sum(p.requests[k] for p in parts) for k in REQUEST_COUNTS},
            end_to_end=_merged(p.end_to_end for p in parts), queue_wait=_merged(p.queue_wait for p in parts),
            storage=_merged(p.storage for p in parts),
            end_to_end_by_qos={q: _merged(p.end_to_end_by_qos[q] for p in parts) for q in first.end_to_end_by_qos},
            service_by_qos={q: _merged(p.service_by_qos[q] for p in parts) for q in first.service_by_qos},
            tiers=_merged_tiers(parts), cache=sum_dicts(p.cache for p in parts), drain=_merged_drain(parts),
            verify=_merged_verify(parts),
            process_cpu_s=sum(p.process_cpu_s for p in parts), peak_rss_bytes=sum(p.peak_rss_bytes for p in parts),
            bytes_per_token=first.bytes_per_token, qos=first.qos)

    # -- rendering -----------------------------------------------------------------------------------
    def io_window(self) -> tuple[float, float] | None:
        """First tier-operation start to last completion across every tier (the honest I/O window)."""
        stats = [getattr(t, op) for t in self.tiers.values() for op in OPS]
        starts = [s.first_start for s in stats if s.first_start is not None]
        ends = [s.last_end for s in stats if s.last_end is not None]
        return (min(starts), max(ends)) if starts and ends else None

    def to_json(self) -> dict[str, Any]:
        """``metrics`` of the result document: the sections in docs/results.md, every figure derived here."""
        tiers = {name: tier.to_json() for name, tier in self.tiers.items()}
        moved = sum(t[op]["bytes"] for t in tiers.values() for op in OPS)
        io = self.io_window()
        sections: dict[str, Any] = {
            "window": {"measured_s": round(self.measured_s, 6),
                       "io_active_s": round(io[1] - io[0], 6) if io else None,
                       "started_at": self.started_at, "ended_at": self.ended_at,
                       "monotonic_start": self.monotonic_start},
            "requests": dict(self.requests),
            "latency_ms": {"end_to_end": self.end_to_end.summary(), "queue_wait": self.queue_wait.summary(),
                           "storage": self.storage.summary()},
            "histograms": {"end_to_end": self.end_to_end.to_dict(), "queue_wait": self.queue_wait.to_dict(),
                           "storage": self.storage.to_dict(),
                           "end_to_end_by_qos": {q: h.to_dict() for q, h in self.end_to_end_by_qos.items()},
                           "service_by_qos": {q: h.to_dict() for q, h in self.service_by_qos.items()}},
            "qos": qos_section(self.end_to_end_by_qos, self.service_by_qos, self.qos),
            "tiers": tiers,
            "cache": cache_section(self.cache),
            "drain": self.drain,
            "verify": {**self.verify, "seconds": round(self.verify["seconds"], 6)},
            "cpu": {"process_cpu_s": round(self.process_cpu_s, 3), "peak_rss_bytes": self.peak_rss_bytes,
                    "cpu_s_per_gb_moved": round(self.process_cpu_s / (moved / GB), 4) if moved else None,
                    "host_share_of_tier_time": host_share(tiers)},
        }
        return {"headline": headline(sections, self.bytes_per_token), **sections}


def _union_window(parts: list[Metrics]) -> tuple[float, float | None, float | None]:
    """The merged window on the wall clock: the earliest client's open to the latest one's close."""
    starts = [p.started_at for p in parts if p.started_at is not None]
    ends = [p.ended_at for p in parts if p.ended_at is not None]
    if not starts or not ends:
        return 0.0, min(starts, default=None), max(ends, default=None)
    return round(max(ends) - min(starts), 6), min(starts), max(ends)


def _merged_tiers(parts: list[Metrics]) -> dict[str, TierMetrics]:
    """Each tier across the clients, in the order they first name it."""
    tiers: dict[str, TierMetrics] = {}
    for part in parts:
        for name, tier in part.tiers.items():
            if name not in tiers:
                tiers[name] = TierMetrics(tier.backend, 0, tier.volatile, tier.describe,
                                          counters={} if tier.counters is not None else None)
            tiers[name].merge(tier)
    return tiers


def _merged_drain(parts: list[Metrics]) -> dict[str, Any]:
    """The drain's counts added up; its length the longest client's."""
    drain = sum_dicts(p.drain for p in parts)
    if drain:
        drain["seconds"] = max(p.drain.get("seconds", 0.0) for p in parts)
        drain.pop("end_to_end_ms", None)  # a percentile summary does not add up: each client keeps its own
    return drain


def _merged_verify(parts: list[Metrics]) -> dict[str, Any]:
    return {"enabled": parts[0].verify["enabled"],
            **{k: sum(p.verify[k] for p in parts) for k in ("bytes_verified", "seconds", "integrity_errors")},
            "mismatches": [m for p in parts for m in p.verify["mismatches"]][:MAX_LISTED]}


def _merged(histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
    merged = LatencyHistogram()
    for histogram in histograms:
        merged.merge(histogram)
    return merged


# -- derived figures: each defined once, on the rendered sections (so ``kvbench check`` re-derives them from a file)
def persistent_tier(tiers: dict[str, Any]) -> str | None:
    """The first non-volatile tier: what MLPerf's ``nvme_*`` metrics refer to (the seed's ``--cache-dir``, the
    storage under test), named in the headline's ``persistent_tier``."""
    for name, tier in tiers.items():
        if not tier["volatile"]:
            return name
    return None


def headline(metrics: dict[str, Any], bytes_per_token: int) -> dict[str, Any]:
    """The MLPerf KV-cache v3.0 headline, computed from the other metric sections."""
    requests, tiers, cache = metrics["requests"], metrics["tiers"], metrics["cache"]
    window_s = metrics["window"]["measured_s"]
    storage_s = metrics["histograms"]["storage"]["total"]
    generated = requests["generated_tokens"]
    served = cache["reads_served_by_tier"]
    reads_total = sum(served.values()) + cache["read_misses"]
    fast_reads = sum(n for name, n in served.items() if tiers.get(name, {}).get("volatile"))
    persistent = persistent_tier(tiers)

    def p95(op: str, layer: str) -> float | None:
        return tiers[persistent][op]["latency_ms"][layer]["p95"] if persistent else None

    moved = sum(tier[op]["bytes"] for tier in tiers.values() for op in OPS)
    if not moved:  # a run that moved no bytes has no storage throughput, whatever its requests said
        window_s = storage_s = 0.0
    return {
        "decode_bytes_read_gb": round(requests["decode_tokens_read"] * bytes_per_token / GB, 6),
        "avg_throughput_tokens_per_sec": round(generated / window_s, 3) if window_s > 0 else None,
        "storage_throughput_tokens_per_sec": round(generated / storage_s, 3) if storage_s > 0 else None,
        # The seed's "device" read is np.load: the file's read and its deserialisation into an array, so under
        # its name the whole read (kvbench's device layer, the syscalls alone, beside it); its "device" write
        # is flush + fsync after np.save's serialisation, which kvbench's device layer of a write is.
        "nvme_read_device_p95_ms": p95("read", "total"),
        "nvme_read_device_only_p95_ms": p95("read", "device"),
        "nvme_write_device_p95_ms": p95("write", "device"),
        "nvme_tokens_processed": (sum(tiers[persistent][op]["bytes"] for op in OPS) // bytes_per_token
                                  if persistent and bytes_per_token else None),
        "end_to_end_latency_p95_ms": metrics["latency_ms"]["end_to_end"]["p95"],
        "cache_hit_rate": round(fast_reads / reads_total, 6) if reads_total else None,
        "requests_completed": requests["completed"],
        "persistent_tier": persistent,
    }


def qos_section(e2e: dict[str, LatencyHistogram], service: dict[str, LatencyHistogram],
                classes: dict[str, QoSClass]) -> dict[str, Any]:
    """Per QoS class: end-to-end and service latency, the SLA judged on service latency (enqueued until the
    storage work is done; generation pacing is simulated GPU time no storage can shorten)."""
    out = {}
    for name, hist in e2e.items():
        summary = service[name].summary()
        target = classes[name]
        p95, p99 = summary["p95"], summary["p99"]
        out[name] = {
            "requests": hist.count, "latency_ms": hist.summary(), "service_latency_ms": summary,
            "sla_p95_ms": target.p95_target_s * 1000, "sla_p99_ms": target.p99_target_s * 1000,
            "priority": target.priority,
            "sla_met": None if p95 is None else bool(p95 <= target.p95_target_s * 1000
                                                     and p99 <= target.p99_target_s * 1000),
        }
    return out


def cache_section(counts: dict[str, Any]) -> dict[str, Any]:
    """The cache's counts and the rates derived from its counters (shared-prefix and multi-turn hit rates)."""
    counters = counts["counters"]

    def rate(kind: str) -> float | None:
        reads = counters.get(f"{kind}_reads", 0)
        return round(counters.get(f"{kind}_hits", 0) / reads, 6) if reads else None

    return {**{k: counts[k] for k in CACHE_COUNTS if k not in ("counters", "occupancy_at_end")},
            "system_prompt_reuse": counters.get("prefix_reads", 0),
            "system_prompt_hits": counters.get("prefix_hits", 0),
            "prefix_hit_rate": rate("prefix"), "multi_turn_hit_rate": rate("turn"),
            "rag_chunk_reads": counters.get("rag_reads", 0),
            "counters": counters, "occupancy_at_end": counts["occupancy_at_end"]}


def host_share(tiers: dict[str, Any]) -> dict[str, float | None]:
    """Per tier, the share of its operation time that was host (total - device: filling and copying buffers,
    a codec's encode/decode, kvbench's Python) rather than waiting on the device (on nvme its syscalls)."""
    shares = {}
    for name, info in tiers.items():
        host = sum(info[op]["histograms"]["host"]["total"] for op in OPS)
        total = sum(info[op]["histograms"]["total"]["total"] for op in OPS)
        shares[name] = round(host / total, 4) if total > 0 else None
    return shares
