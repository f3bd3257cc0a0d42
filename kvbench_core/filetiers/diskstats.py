"""The kernel's own byte counters for the block device under a directory.

kvbench's reported bytes are only honest if the device agrees.  ``/proc/diskstats``
counts sectors (always 512 bytes, whatever the device's block size) read and
written per device and per partition; a snapshot before and after a piece of
work, subtracted, is what really reached the device.  Only meaningful for I/O
that bypasses the page cache (O_DIRECT) or is forced out of it (fsync, dropped
cache), and only when nothing else uses the device at the same time.

``process_io`` reads the same kind of counters restricted to this process
(``/proc/self/io``: bytes this process's reads fetched from, and its writes
sent towards, the block layer).  Other processes cannot disturb it, so it pins
kvbench's own traffic exactly even on a busy machine; diskstats then shows
what the device as a whole saw, journal and metadata included.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench_core.filetiers.fsinfo import block_device_of

DISKSTATS = "/proc/diskstats"
PROC_SELF_IO = "/proc/self/io"
SECTOR = 512  # diskstats sectors are 512 B regardless of the logical block size


@dataclass(frozen=True, slots=True)
class DiskCounters:
    """Cumulative (or, after subtraction, delta) bytes read and written."""

    read_bytes: int
    write_bytes: int

    def __sub__(self, earlier: DiskCounters) -> DiskCounters:
        return DiskCounters(self.read_bytes - earlier.read_bytes, self.write_bytes - earlier.write_bytes)


class DiskStats:
    """Counters of one device, found by ``major:minor`` (the name alone is ambiguous in containers)."""

    def __init__(self, name: str, major_minor: str, diskstats: str = DISKSTATS) -> None:
        self.name = name
        self.major, self.minor = (int(part) for part in major_minor.split(":"))
        self._diskstats = diskstats

    @classmethod
    def for_path(cls, path: str) -> DiskStats | None:
        """Counters of the device holding ``path``; None when it has none (tmpfs, overlay, NFS)."""
        device = block_device_of(path)
        if device is None:
            return None
        stats = cls(device.name, device.major_minor)
        try:
            stats.snapshot()
        except (OSError, LookupError):
            return None
        return stats

    def snapshot(self) -> DiskCounters:
        """Current counters (after major, minor, name: reads, merged, sectors read, ms, writes, merged,
        sectors written…)."""
        with open(self._diskstats) as lines:
            for line in lines:
                fields = line.split()
                if len(fields) >= 10 and int(fields[0]) == self.major and int(fields[1]) == self.minor:
                    return DiskCounters(read_bytes=int(fields[5]) * SECTOR, write_bytes=int(fields[9]) * SECTOR)
        raise LookupError(f"device {self.name} ({self.major}:{self.minor}) not in {self._diskstats}")


def process_io(proc_io: str = PROC_SELF_IO) -> DiskCounters:
    """This process's block-layer traffic (all threads).  Buffered writes count when pages are
    dirtied, not when they reach the device; reads count only what the device delivered."""
    values: dict[str, int] = {}
    with open(proc_io) as lines:
        for line in lines:
            name, _, value = line.partition(":")
            values[name.strip()] = int(value)
    return DiskCounters(read_bytes=values["read_bytes"], write_bytes=values["write_bytes"])
