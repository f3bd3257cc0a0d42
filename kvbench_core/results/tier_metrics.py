"""One tier's figures in a run's metrics: what it is, its operation stats (per request), what its device
moved in each phase (by time), and how two clients' figures of the same tier add up.

Split out of ``results/metrics.py`` (the run's model), which renders and merges a run through it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.codecs.figures import tier_codec
from kvbench_core.engine.measure.opstats import OpStats
from kvbench_core.engine.measure.records import PHASES, DeviceStats

OPS = ("read", "write")


def no_device() -> dict[str, dict[str, DeviceStats]]:
    return {op: {phase: DeviceStats() for phase in PHASES} for op in OPS}


@dataclass
class TierMetrics:
    """One tier: what it is, its read and write operation stats (per request) and what its device moved in
    each phase (by time), with every byte it reported moving (``moved``: what the phases add up to)."""

    backend: str
    capacity_bytes: int | None
    volatile: bool
    describe: dict[str, Any]
    read: OpStats = field(default_factory=OpStats)
    write: OpStats = field(default_factory=OpStats)
    reads_served: int = 0
    counters: dict[str, Any] | None = None  # the backend's own (S3 requests, redis commands)
    device: dict[str, dict[str, DeviceStats]] = field(default_factory=no_device)  # op -> phase -> stats
    moved: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.backend, "capacity_bytes": self.capacity_bytes,
                               "volatile": self.volatile, "describe": self.describe,
                               "read": self.op_json("read"), "write": self.op_json("write"),
                               "reads_served": self.reads_served}
        out["codec"] = tier_codec(out)
        if self.counters is not None:
            out["counters"] = self.counters
        return out

    def op_json(self, op: str) -> dict[str, Any]:
        """An op's operation stats, its device's phases, and the bandwidth: the window's device bytes over
        the span of the window's commands (booked by time, docs/metrics.md)."""
        window = self.device[op]["window"]
        active = window.active_s()
        return {**getattr(self, op).to_dict(), "active_window_s": round(active, 6),
                "bandwidth_bytes_per_s": window.bytes / active if active > 0 else None,
                "device": {**{phase: stats.to_dict() for phase, stats in self.device[op].items()},
                           "moved_bytes": self.moved[op]}}

    def merge(self, other: TierMetrics) -> None:
        """Add another client's figures of the same tier (its times already on the wall clock)."""
        self.capacity_bytes = None if None in (self.capacity_bytes, other.capacity_bytes) \
            else self.capacity_bytes + other.capacity_bytes
        self.read.merge(other.read)
        self.write.merge(other.write)
        self.reads_served += other.reads_served
        if self.counters is not None:
            self.counters = sum_dicts([self.counters, other.counters or {}])
        for op in OPS:
            self.moved[op] += other.moved[op]
            for phase in PHASES:
                self.device[op][phase].merge(other.device[op][phase])


def sum_dicts(dicts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Numbers add up (nested dicts too); anything else keeps the first client's value."""
    out: dict[str, Any] = {}
    for data in dicts:
        for key, value in data.items():
            if key not in out:
                out[key] = copy.deepcopy(value)
            elif isinstance(value, dict) and isinstance(out[key], dict):
                out[key] = sum_dicts([out[key], value])
            elif _is_number(value) and _is_number(out[key]):
                out[key] += value
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
