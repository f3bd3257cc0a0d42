"""The kernel's own byte counters for the block device under a directory.

kvbench's reported bytes are only honest if the device agrees.  ``/proc/diskstats``
counts sectors (always 512 bytes, whatever the device's block size) read and
written per device and per partition; a snapshot before and after a piece of
work, subtracted, is what really reached the device.  Only meaningful for I/O
that bypasses the page cache (O_DIRECT) or is forced out of it (fsync, dropped
cache), and only when nothing else uses the device at the same time.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench_nvme.fsinfo import block_device_of

DISKSTATS = "/proc/diskstats"
SECTOR = 512  # diskstats sectors are 512 B regardless of the logical block size


@dataclass(frozen=True, slots=True)
class DiskCounters:
    """Cumulative (or, after subtraction, delta) I/O counters of one block device."""

    read_bytes: int
    write_bytes: int
    read_ios: int
    write_ios: int

    def __sub__(self, earlier: DiskCounters) -> DiskCounters:
        return DiskCounters(
            read_bytes=self.read_bytes - earlier.read_bytes,
            write_bytes=self.write_bytes - earlier.write_bytes,
            read_ios=self.read_ios - earlier.read_ios,
            write_ios=self.write_ios - earlier.write_ios,
        )


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
        """Current counters (fields: reads, merged, sectors read, ms, writes, merged, sectors written…)."""
        with open(self._diskstats) as lines:
            for line in lines:
                fields = line.split()
                if len(fields) >= 10 and int(fields[0]) == self.major and int(fields[1]) == self.minor:
                    return DiskCounters(
                        read_bytes=int(fields[5]) * SECTOR,
                        write_bytes=int(fields[9]) * SECTOR,
                        read_ios=int(fields[3]),
                        write_ios=int(fields[7]),
                    )
        raise LookupError(f"device {self.name} ({self.major}:{self.minor}) not in {self._diskstats}")
