"""Device-level cross-check of a replay: did the block device see the bytes and requests the projection says?

No eBPF, no root: the kernel's ``/proc/diskstats`` counters for the device
under the tier's directory are read before and after the measured window, and
the deltas are compared with the projection.  Each planned command becomes
``ceil(size / max_sectors_kb)`` block requests (the block layer splits larger
bios); the kernel may merge adjacent ones, so requests are compared as
``completed + merged``.  The device is the one the tier itself reports in
``describe()["block_device"]`` (the nvme tier does), so kvio does not guess
where a tier keeps its files.

What it can show: that O_DIRECT reads and writes reached the device with the
planned volume and request count.  What it cannot: which object a request
belonged to (no trace id at this layer), anything about traffic that shares
the device (the OS, other jobs), filesystem metadata and journal writes (they
inflate the write side), or buffered I/O that the page cache absorbed.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

DISKSTATS = "/proc/diskstats"
SYS_BLOCK = "/sys/block"
SECTOR = 512  # diskstats counts 512-byte sectors whatever the device's block size
#: Relative byte difference still called agreement: room for a few metadata blocks, not for a missed object.
BYTES_TOLERANCE = 0.01


@dataclass(frozen=True)
class DiskCounters:
    """Cumulative (or, subtracted, delta) counters of one block device."""

    reads: int
    read_merges: int
    read_bytes: int
    writes: int
    write_merges: int
    write_bytes: int

    def __sub__(self, earlier: DiskCounters) -> DiskCounters:
        return DiskCounters(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))


def read_counters(major_minor: str, diskstats: str = DISKSTATS) -> DiskCounters:
    """The device's line of ``/proc/diskstats`` (matched by ``major:minor``; names are ambiguous in containers).

    Fields after major, minor, name: reads, reads merged, sectors read, ms
    reading, writes, writes merged, sectors written, …
    """
    major, minor = major_minor.split(":")
    with open(diskstats) as lines:
        for line in lines:
            f = line.split()
            if len(f) >= 10 and f[0] == major and f[1] == minor:
                return DiskCounters(int(f[3]), int(f[4]), int(f[5]) * SECTOR, int(f[7]), int(f[8]), int(f[9]) * SECTOR)
    raise LookupError(f"device {major_minor} is not in {diskstats}")


def max_io_bytes(disk: str, sys_block: str = SYS_BLOCK) -> int | None:
    """The largest request the block layer sends the disk (``queue/max_sectors_kb``), if visible."""
    try:
        with open(os.path.join(sys_block, disk, "queue", "max_sectors_kb")) as handle:
            return int(handle.read()) * 1024
    except (OSError, ValueError):
        return None


def expected_requests(commands: Counter[int], max_io: int | None) -> int:
    """Block requests the commands become once the block layer splits them at ``max_io``."""
    if not max_io:
        return sum(commands.values())
    return sum(-(-size // max_io) * count for size, count in commands.items())


def _direction(planned: Counter[int], max_io: int | None, device_bytes: int, requests: int,
               merges: int) -> dict[str, Any]:
    planned_bytes = sum(size * count for size, count in planned.items())
    expected = expected_requests(planned, max_io)
    ratio = device_bytes / planned_bytes if planned_bytes else None
    return {
        "planned_bytes": planned_bytes, "device_bytes": device_bytes, "bytes_ratio": ratio,
        "bytes_agree": ratio is not None and abs(ratio - 1) <= BYTES_TOLERANCE,
        "planned_commands": sum(planned.values()), "expected_requests": expected,
        "device_requests": requests, "device_merges": merges, "requests_agree": requests + merges == expected,
    }


class DiskWindow:
    """Diskstats deltas of a tier's device around a measured window.

    Built from the tier's ``describe()``; ``reason`` says why no check is possible
    (a memory tier, tmpfs, a container without ``/sys``).
    """

    def __init__(self, tier_description: dict[str, Any], diskstats: str = DISKSTATS,
                 sys_block: str = SYS_BLOCK) -> None:
        self.device = tier_description.get("block_device") or None
        self.direct = tier_description.get("direct")
        self._diskstats, self._sys_block = diskstats, sys_block
        self._before: DiskCounters | None = None
        self.reason: str | None = None
        if self.device is None:
            self.reason = "the tier reports no block device (memory tier, tmpfs, network or overlay filesystem)"

    def start(self) -> None:
        if self.device is None:
            return
        try:
            self._before = read_counters(self.device["major_minor"], self._diskstats)
        except (OSError, LookupError) as error:
            self.reason = f"cannot read {self._diskstats}: {error}"

    def report(self, planned_store: Counter[int], planned_load: Counter[int]) -> dict[str, Any]:
        """Deltas since ``start`` against what the window should have issued (all measured passes)."""
        if self.device is None or self._before is None:
            return {"available": False, "reason": self.reason}
        try:
            delta = read_counters(self.device["major_minor"], self._diskstats) - self._before
        except (OSError, LookupError) as error:
            return {"available": False, "reason": f"cannot read {self._diskstats}: {error}"}
        max_io = max_io_bytes(self.device.get("disk") or self.device["name"], self._sys_block)
        notes = ["counts include any other traffic on the device and, for writes, filesystem "
                 "metadata and journal blocks"]
        if self.direct is False:
            notes.append("the tier does not use O_DIRECT: the page cache can absorb reads and defer writes, "
                         "so these counters need not match the projection")
        return {
            "available": True, "device": self.device["name"], "disk": self.device.get("disk"),
            "max_io_bytes": max_io, "bytes_tolerance": BYTES_TOLERANCE,
            "write": _direction(planned_store, max_io, delta.write_bytes, delta.writes, delta.write_merges),
            "read": _direction(planned_load, max_io, delta.read_bytes, delta.reads, delta.read_merges),
            "notes": notes,
        }
