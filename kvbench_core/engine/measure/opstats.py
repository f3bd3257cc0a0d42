"""Per-tier operation statistics: per-entry operations (MLPerf's L3/L4) and per-command latency (fio's clat).

An *operation* is one ``write``/``read`` of a whole KV entry on one tier (1.6 GB for a long llama3.1-8b
context); a *command* is one device command it issues (a ``pread``/``pwrite``, an HTTP part, a redis
command, a memcpy block).  Storage engineers read the second; MLPerf reports the first.  Both land in
mergeable histograms here, so threads, clients and ranks merge bucket counts, never percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.engine.measure.histogram import COMMAND_PERCENTILES, LatencyHistogram


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
    #: Latency of each device command the tier reported (empty for a tier that reports none).
    command: LatencyHistogram = field(default_factory=LatencyHistogram)
    command_bytes: int = 0
    #: A codec stage's encode (write) or decode (read) time per operation that ran the codec, the logical
    #: bytes those operations coded, and the bytes that reached the device (``bytes`` stays the logical KV
    #: bytes): empty, 0 and ``bytes`` without a codec.  A demotion that copies encoded bytes codes nothing.
    codec: LatencyHistogram = field(default_factory=LatencyHistogram)
    codec_bytes: int = 0
    physical_bytes: int = 0
    #: Writes a shared tier completed without a transfer (``IOTiming.dedup_bytes``, ``nbytes`` 0): stored
    #: entries, but no operation, no bytes moved, no command, no latency here.  ``dedup_bytes`` holds their
    #: bytes plus the deduplicated part of operations that moved the rest (a codec stage's segments another
    #: writer had committed), so ``bytes + dedup_bytes`` is always the bytes stored.
    dedup_stores: int = 0
    dedup_bytes: int = 0
    first_start: float | None = None
    last_end: float | None = None

    def add(self, timing: IOTiming, start: float, end: float) -> None:
        self.dedup_bytes += timing.dedup_bytes
        if not timing.transferred:
            self.dedup_stores += 1
            return
        self.ops += 1
        self.bytes += timing.nbytes
        self.commands += timing.commands
        self.total.add(timing.total)
        # L4 host is everything that is not waiting on the device (docs/metrics.md), the same for every tier
        # whatever part of it the backend could name, so host + device is the operation's total.
        device = min(timing.device, timing.total)  # a backend's device clock past the operation's own is capped
        self.host.add(timing.total - device)
        self.device.add(device)
        self.physical_bytes += timing.nbytes if timing.physical_bytes is None else timing.physical_bytes
        if timing.codec > 0:
            self.codec.add(timing.codec)
            self.codec_bytes += timing.nbytes
        self._span(start, end)

    def add_command(self, nbytes: int, start: float, end: float) -> None:
        self.command.add(end - start)
        self.command_bytes += nbytes

    def _span(self, start: float | None, end: float | None) -> None:
        if start is not None:
            self.first_start = start if self.first_start is None else min(self.first_start, start)
        if end is not None:
            self.last_end = end if self.last_end is None else max(self.last_end, end)

    def merge(self, other: OpStats) -> None:
        self.ops += other.ops
        self.bytes += other.bytes
        self.commands += other.commands
        self.errors += other.errors
        self.command_bytes += other.command_bytes
        self.physical_bytes += other.physical_bytes
        self.codec_bytes += other.codec_bytes
        self.dedup_stores += other.dedup_stores
        self.dedup_bytes += other.dedup_bytes
        for name in ("total", "host", "device", "command", "codec"):
            getattr(self, name).merge(getattr(other, name))
        self._span(other.first_start, other.last_end)

    def to_dict(self) -> dict[str, Any]:
        """The operations' figures; the bandwidth is the device's, by time (``TierMetrics.to_json``)."""
        return {
            "ops": self.ops, "bytes": self.bytes, "commands": self.commands, "errors": self.errors,
            "mean_entry_bytes": round(self.bytes / self.ops) if self.ops else None,
            "latency_ms": {"total": self.total.summary(), "host": self.host.summary(),
                           "device": self.device.summary(), "codec": self.codec.summary()},
            "command_latency_ms": self.command.summary(percentiles=COMMAND_PERCENTILES),
            "command_bytes": self.command_bytes,
            "physical_bytes": self.physical_bytes,
            "codec_bytes": self.codec_bytes,
            "dedup_stores": self.dedup_stores, "dedup_bytes": self.dedup_bytes,
            "histograms": {"total": self.total.to_dict(), "host": self.host.to_dict(),
                           "device": self.device.to_dict(), "command": self.command.to_dict(),
                           "codec": self.codec.to_dict()},
            "first_start": self.first_start, "last_end": self.last_end,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpStats:
        hists = data["histograms"]
        command = hists.get("command")  # results written before per-command latency have none
        codec = hists.get("codec")  # nor before codecs
        return cls(ops=data["ops"], bytes=data["bytes"], commands=data["commands"], errors=data["errors"],
                   total=LatencyHistogram.from_dict(hists["total"]), host=LatencyHistogram.from_dict(hists["host"]),
                   device=LatencyHistogram.from_dict(hists["device"]),
                   command=LatencyHistogram.from_dict(command) if command else LatencyHistogram(),
                   command_bytes=data.get("command_bytes", 0),
                   codec=LatencyHistogram.from_dict(codec) if codec else LatencyHistogram(),
                   physical_bytes=data.get("physical_bytes", data["bytes"]), codec_bytes=data.get("codec_bytes", 0),
                   dedup_stores=data.get("dedup_stores", 0), dedup_bytes=data.get("dedup_bytes", 0),
                   first_start=data.get("first_start"), last_end=data.get("last_end"))


def measured_queue_depth(tiers: dict[str, Any], window_s: float) -> dict[str, float | None]:
    """Per tier, the mean number of device commands in flight over the window (Little's law: the time
    commands spent in flight ÷ the window), from the per-command histograms; None for a tier that
    reports no commands.  This is the queue depth the storage saw, not the request concurrency asked for."""
    out: dict[str, float | None] = {}
    for name, info in tiers.items():
        busy = sum(info[op]["histograms"].get("command", {}).get("total", 0.0) for op in ("read", "write"))
        reported = any(info[op]["histograms"].get("command", {}).get("count") for op in ("read", "write"))
        out[name] = round(busy / window_s, 3) if reported and window_s > 0 else None
    return out
