"""Telemetry for the four latency layers, per-tier counters and the per-interval time series.

L1 end-to-end (queue wait + storage + generation) per QoS class, L2 storage
time per request, L3 per-tier operation time, L4 host vs device per tier.
Everything lands in mergeable ``LatencyHistogram``s.  Bandwidth is computed
over the window in which I/O really happened (first operation start to last
completion, drain included), never over the nominal duration.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.engine.histogram import LatencyHistogram


@dataclass
class OpStats:
    """One operation kind (read or write) on one tier."""

    ops: int = 0
    bytes: int = 0
    commands: int = 0
    errors: int = 0
    total: LatencyHistogram = field(default_factory=LatencyHistogram)
    host: LatencyHistogram = field(default_factory=LatencyHistogram)
    device: LatencyHistogram = field(default_factory=LatencyHistogram)
    first_start: float | None = None
    last_end: float | None = None

    def add(self, timing: IOTiming, start: float, end: float) -> None:
        self.ops += 1
        self.bytes += timing.nbytes
        self.commands += timing.commands
        self.total.add(timing.total)
        self.host.add(timing.host)
        self.device.add(timing.device)
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = end if self.last_end is None else max(self.last_end, end)

    def merge(self, other: OpStats) -> None:
        self.ops += other.ops
        self.bytes += other.bytes
        self.commands += other.commands
        self.errors += other.errors
        for name in ("total", "host", "device"):
            getattr(self, name).merge(getattr(other, name))
        starts = [s for s in (self.first_start, other.first_start) if s is not None]
        ends = [e for e in (self.last_end, other.last_end) if e is not None]
        self.first_start = min(starts) if starts else None
        self.last_end = max(ends) if ends else None

    def to_dict(self) -> dict[str, Any]:
        window = (self.last_end - self.first_start) if self.ops and self.last_end is not None else 0.0
        return {
            "ops": self.ops, "bytes": self.bytes, "commands": self.commands, "errors": self.errors,
            "active_window_s": round(window, 6),
            "bandwidth_bytes_per_s": (self.bytes / window) if window > 0 else None,
            "latency_ms": {"total": self.total.summary(), "host": self.host.summary(),
                           "device": self.device.summary()},
            "histograms": {"total": self.total.to_dict(), "host": self.host.to_dict(),
                           "device": self.device.to_dict()},
            "first_start": self.first_start, "last_end": self.last_end,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpStats:
        hists = data["histograms"]
        return cls(ops=data["ops"], bytes=data["bytes"], commands=data["commands"], errors=data["errors"],
                   total=LatencyHistogram.from_dict(hists["total"]), host=LatencyHistogram.from_dict(hists["host"]),
                   device=LatencyHistogram.from_dict(hists["device"]),
                   first_start=data.get("first_start"), last_end=data.get("last_end"))


class Telemetry:
    """Thread-safe collector.  Nothing is recorded until ``start_measuring``; warm-up is excluded."""

    def __init__(self, qos_classes: list[str], clock: Any = time.perf_counter) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.qos_classes = qos_classes
        self.measuring = False
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.tiers: dict[str, dict[str, OpStats]] = defaultdict(lambda: {"read": OpStats(), "write": OpStats()})
            self.demotions: dict[str, int] = defaultdict(int)  # "src->dst" -> bytes
            self.demotion_count: dict[str, int] = defaultdict(int)
            self.promotions = 0
            self.evictions_deleted = 0
            self.e2e = {q: LatencyHistogram() for q in self.qos_classes}
            self.service = {q: LatencyHistogram() for q in self.qos_classes}
            self.e2e_all = LatencyHistogram()
            self.queue_wait = LatencyHistogram()
            self.storage = LatencyHistogram()
            self.requests = 0
            self.requests_failed = 0
            self.context_tokens = 0
            self.generated_tokens = 0
            self.decode_tokens_read = 0
            self.counters: dict[str, int] = defaultdict(int)
            self.read_hits: dict[str, int] = defaultdict(int)  # tier name -> reads served
            self.read_misses = 0
            self.verify_seconds = 0.0
            self.verified_bytes = 0
            self.integrity_errors: list[dict[str, Any]] = []
            self.errors: list[dict[str, Any]] = []
            self.window_start = self._clock()
            self.window_end: float | None = None
            self.series: list[dict[str, Any]] = []
            self._interval = self._new_interval()

    def _new_interval(self) -> dict[str, Any]:
        return {"start": self._clock(), "requests": 0, "tokens": 0, "read_bytes": 0, "write_bytes": 0,
                "e2e": {q: LatencyHistogram() for q in self.qos_classes},
                "service": {q: LatencyHistogram() for q in self.qos_classes}, "storage": LatencyHistogram()}

    def start_measuring(self) -> None:
        self.reset()
        self.measuring = True

    def stop_measuring(self) -> None:
        with self._lock:
            self.measuring = False
            self.window_end = self._clock()

    # -- recording ---------------------------------------------------------------------------------
    def record_op(self, tier: str, op: str, timing: IOTiming, start: float, end: float) -> None:
        if not self.measuring:
            return
        with self._lock:
            self.tiers[tier][op].add(timing, start, end)
            self._interval["read_bytes" if op == "read" else "write_bytes"] += timing.nbytes

    def record_op_error(self, tier: str, op: str, key: str, error: BaseException) -> None:
        with self._lock:
            if op in ("read", "write"):  # a failed delete (eviction, cleanup) is listed below, not in op stats
                self.tiers[tier][op].errors += 1
            if len(self.errors) < 100:
                self.errors.append({"tier": tier, "op": op, "key": key, "error": str(error)[:500]})

    def record_demotion(self, src: str, dst: str, nbytes: int) -> None:
        if self.measuring:
            with self._lock:
                self.demotions[f"{src}->{dst}"] += nbytes
                self.demotion_count[f"{src}->{dst}"] += 1

    def record_eviction_delete(self) -> None:
        if self.measuring:
            with self._lock:
                self.evictions_deleted += 1

    def record_promotion(self) -> None:
        if self.measuring:
            with self._lock:
                self.promotions += 1

    def record_read_outcome(self, tier: str | None) -> None:
        if not self.measuring:
            return
        with self._lock:
            if tier is None:
                self.read_misses += 1
            else:
                self.read_hits[tier] += 1

    def count(self, name: str, n: int = 1) -> None:
        if self.measuring:
            with self._lock:
                self.counters[name] += n

    def record_verify(self, seconds: float, nbytes: int) -> None:
        if self.measuring:
            with self._lock:
                self.verify_seconds += seconds
                self.verified_bytes += nbytes

    def record_integrity_error(self, tier: str, key: str, offset: int | None) -> None:
        with self._lock:
            if len(self.integrity_errors) < 100:
                self.integrity_errors.append({"tier": tier, "key": key, "first_bad_offset": offset})
            self.counters["integrity_errors"] += 1

    def record_request(self, qos: str, e2e_s: float, service_s: float, queue_s: float, storage_s: float,
                       context_tokens: int, generated_tokens: int, decode_tokens_read: int) -> None:
        """``e2e_s`` runs to the response's end, simulated generation included; ``service_s`` stops when
        the request's storage work is done (queue wait + cache reads and writes): what the QoS SLAs judge."""
        if not self.measuring:
            return
        with self._lock:
            self.e2e[qos].add(e2e_s)
            self.service[qos].add(service_s)
            self.e2e_all.add(e2e_s)
            self.queue_wait.add(queue_s)
            self.storage.add(storage_s)
            self.requests += 1
            self.context_tokens += context_tokens
            self.generated_tokens += generated_tokens
            self.decode_tokens_read += decode_tokens_read
            self._interval["requests"] += 1
            self._interval["tokens"] += context_tokens + generated_tokens
            self._interval["e2e"][qos].add(e2e_s)
            self._interval["service"][qos].add(service_s)
            self._interval["storage"].add(storage_s)

    def record_request_failed(self) -> None:
        with self._lock:
            self.requests_failed += 1

    # -- intervals ---------------------------------------------------------------------------------
    def close_interval(self, users: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Finish the current interval, append it to the series and return it (for autoscalers)."""
        with self._lock:
            now = self._clock()
            interval, self._interval = self._interval, self._new_interval()
            span = max(now - interval["start"], 1e-9)
            point = {
                "t_s": round(now - self.window_start, 3),
                "interval_s": round(span, 3),
                "users": users,
                "requests": interval["requests"],
                "tokens_per_s": interval["tokens"] / span,
                "read_bytes_per_s": interval["read_bytes"] / span,
                "write_bytes_per_s": interval["write_bytes"] / span,
                "e2e_p95_ms": {q: _ms(h.quantile(0.95)) for q, h in interval["e2e"].items() if h.count},
                "e2e_p99_ms": {q: _ms(h.quantile(0.99)) for q, h in interval["e2e"].items() if h.count},
                "service_p95_ms": {q: _ms(h.quantile(0.95)) for q, h in interval["service"].items() if h.count},
                "service_p99_ms": {q: _ms(h.quantile(0.99)) for q, h in interval["service"].items() if h.count},
                "storage_p95_ms": _ms(interval["storage"].quantile(0.95)),
                **(extra or {}),
            }
            if self.measuring:
                self.series.append(point)
            return point

    def io_window(self) -> tuple[float, float] | None:
        """First tier-operation start to last completion across every tier (the honest window)."""
        starts = [s.first_start for t in self.tiers.values() for s in t.values() if s.first_start is not None]
        ends = [s.last_end for t in self.tiers.values() for s in t.values() if s.last_end is not None]
        if not starts or not ends:
            return None
        return min(starts), max(ends)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 4)
