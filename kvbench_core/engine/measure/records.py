"""The records telemetry books: an operation with its device commands, a request's tally, the drain's
figures, the device's bytes by the phase in which each command completed, and the counts a time-series
point carries (with the one definition of its rates)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.opstats import OpStats

#: A device command: (bytes, start, end) on the monotonic clock.
Command = tuple[int, float, float]


@dataclass(slots=True)
class OpRecord:
    """One per-entry operation with the device commands it issued (booked together, in one window)."""

    tier: str
    op: str
    timing: IOTiming
    start: float
    end: float
    commands: list[Command] = field(default_factory=list)


@dataclass
class RequestTally:
    """What one request did, held back until the request ends, then booked whole in one window.

    A request's reads, hits, misses, writes and tier operations all land in the window the request
    started in (measured window, drain, or warm-up = nowhere), so a request that straddles the warm-up
    boundary cannot count three hits against two reads, and the parts always add up.  The bytes its
    commands moved are booked apart, by time, as they complete (``DeviceStats``).
    """

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    outcomes: list[str | None] = field(default_factory=list)  # tier name per read, None for a miss
    ops: list[OpRecord] = field(default_factory=list)
    verified_bytes: int = 0
    verify_seconds: float = 0.0
    demotions: list[tuple[str, int]] = field(default_factory=list)  # ("src->dst", bytes)
    evictions_deleted: int = 0
    promotions: int = 0


#: The phases device bytes are booked in, by when each command completed (docs/metrics.md, "booking rules"):
#: before the window opened (set-up, preload, warm-up), in the measured window, after it closed (the drain).
PHASES = ("warmup", "window", "drain")


@dataclass
class DeviceStats:
    """What one tier's device moved for one op (read or write) in one phase, booked when each command
    completed, as fio and the block layer count: a request that straddles the window's open or close puts
    each of its commands in the phase it completed in, so the window's bytes are the bytes the device moved
    while it was open, whatever became of the request.  ``cancelled_*`` are operations stopped at the drain
    limit: their completed commands are in ``bytes`` like any other, counted here too so the partial work
    is visible.  ``first_start`` (clipped to the window's open) and ``last_end`` span the window's commands:
    the bandwidth's active window."""

    bytes: int = 0
    commands: int = 0
    cancelled_ops: int = 0
    cancelled_bytes: int = 0
    first_start: float | None = None
    last_end: float | None = None

    def add(self, nbytes: int, commands: int, start: float, end: float) -> None:
        self.bytes += nbytes
        self.commands += commands
        self._span(start, end)

    def _span(self, start: float | None, end: float | None) -> None:
        if start is not None:
            self.first_start = start if self.first_start is None else min(self.first_start, start)
        if end is not None:
            self.last_end = end if self.last_end is None else max(self.last_end, end)

    def merge(self, other: DeviceStats) -> None:
        self.bytes += other.bytes
        self.commands += other.commands
        self.cancelled_ops += other.cancelled_ops
        self.cancelled_bytes += other.cancelled_bytes
        self._span(other.first_start, other.last_end)

    def active_s(self) -> float:
        """First command start to last command end (0 when none)."""
        return self.last_end - self.first_start if self.first_start is not None and self.last_end is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "commands": self.commands, "cancelled_ops": self.cancelled_ops,
                "cancelled_bytes": self.cancelled_bytes, "first_start": self.first_start, "last_end": self.last_end}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceStats:
        return cls(**{name: data.get(name) for name in ("first_start", "last_end")},
                   **{name: data.get(name, 0) for name in ("bytes", "commands", "cancelled_ops", "cancelled_bytes")})


def device_ops() -> dict[str, DeviceStats]:
    return {"read": DeviceStats(), "write": DeviceStats()}


#: The counts a time-series point carries; its rates are derived from them and its length alone.
SERIES_COUNTS = ("requests", "generated_tokens", "context_tokens", "read_bytes", "write_bytes")


def series_rates(counts: dict[str, float], span_s: float) -> dict[str, float]:
    """A point's rates from its counts (one definition, used by the telemetry and by merges)."""
    span_s = max(span_s, 1e-9)
    return {"generated_tokens_per_s": counts["generated_tokens"] / span_s,
            "context_tokens_per_s": counts["context_tokens"] / span_s,
            "read_bytes_per_s": counts["read_bytes"] / span_s,
            "write_bytes_per_s": counts["write_bytes"] / span_s}


@dataclass
class DrainStats:
    """What happened after the measured duration ended: requests that finished (``tiers``: their operations,
    per request), and the bytes the devices moved after the close (``device``: the drain phase's
    ``DeviceStats``, by time; ``read_bytes``/``write_bytes`` are theirs)."""

    seconds: float = 0.0
    requests: int = 0
    requests_failed: int = 0
    requests_write_failed: int = 0
    requests_cancelled: int = 0
    context_tokens: int = 0
    generated_tokens: int = 0
    end_to_end: LatencyHistogram = field(default_factory=LatencyHistogram)
    tiers: dict[str, dict[str, OpStats]] = field(default_factory=lambda: defaultdict(tier_ops))
    device: dict[str, dict[str, DeviceStats]] = field(default_factory=lambda: defaultdict(device_ops))

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 6), "requests_completed": self.requests,
                "requests_failed": self.requests_failed, "requests_write_failed": self.requests_write_failed,
                "requests_cancelled": self.requests_cancelled, "context_tokens": self.context_tokens,
                "generated_tokens": self.generated_tokens, "end_to_end_ms": self.end_to_end.summary(),
                "read_bytes": sum(t["read"].bytes for t in self.device.values()),
                "write_bytes": sum(t["write"].bytes for t in self.device.values()),
                "cancelled_bytes": sum(s.cancelled_bytes for t in self.device.values() for s in t.values()),
                "tiers": {name: {op: {"ops": s.ops, "bytes": s.bytes, "command_bytes": s.command_bytes,
                                      "dedup_stores": s.dedup_stores, "dedup_bytes": s.dedup_bytes}
                                 for op, s in ops.items()} for name, ops in self.tiers.items()}}


def tier_ops() -> dict[str, OpStats]:
    return {"read": OpStats(), "write": OpStats()}
