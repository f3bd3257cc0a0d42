"""The records telemetry books: an operation with its device commands, a request's tally, the drain's
figures, and the counts a time-series point carries (with the one definition of its rates)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.engine.histogram import LatencyHistogram
from kvbench_core.engine.opstats import OpStats

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
    boundary cannot count three hits against two reads, and the parts always add up.
    """

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    outcomes: list[str | None] = field(default_factory=list)  # tier name per read, None for a miss
    ops: list[OpRecord] = field(default_factory=list)
    verified_bytes: int = 0
    verify_seconds: float = 0.0
    demotions: list[tuple[str, int]] = field(default_factory=list)  # ("src->dst", bytes)
    evictions_deleted: int = 0
    promotions: int = 0


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
    """What happened after the measured duration ended: requests that finished, bytes still moved."""

    seconds: float = 0.0
    requests: int = 0
    requests_failed: int = 0
    requests_write_failed: int = 0
    requests_cancelled: int = 0
    context_tokens: int = 0
    generated_tokens: int = 0
    end_to_end: LatencyHistogram = field(default_factory=LatencyHistogram)
    tiers: dict[str, dict[str, OpStats]] = field(default_factory=lambda: defaultdict(tier_ops))

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 6), "requests_completed": self.requests,
                "requests_failed": self.requests_failed, "requests_write_failed": self.requests_write_failed,
                "requests_cancelled": self.requests_cancelled, "context_tokens": self.context_tokens,
                "generated_tokens": self.generated_tokens, "end_to_end_ms": self.end_to_end.summary(),
                "read_bytes": sum(_moved(t["read"]) for t in self.tiers.values()),
                "write_bytes": sum(_moved(t["write"]) for t in self.tiers.values()),
                "tiers": {name: {op: {"ops": s.ops, "bytes": s.bytes, "command_bytes": s.command_bytes,
                                      "dedup_stores": s.dedup_stores, "dedup_bytes": s.dedup_bytes}
                                 for op, s in ops.items()} for name, ops in self.tiers.items()}}


def _moved(stats: OpStats) -> int:
    """Bytes a tier moved in the drain: its device commands where it reports them, else its operations."""
    return stats.command_bytes or stats.bytes


def tier_ops() -> dict[str, OpStats]:
    return {"read": OpStats(), "write": OpStats()}
