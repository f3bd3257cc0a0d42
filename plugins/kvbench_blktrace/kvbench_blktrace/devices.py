"""Which block devices carry a directory's requests, as the block tracepoints name them.

Block-request tracepoints report the *whole disk* that queues the request
(``vda``, ``nvme0n1``), never the partition a filesystem sits on, and a
device-mapper or md volume has no request queue of its own: its requests are
queued on the disks under it (``/sys/block/dm-0/slaves``).  So the filter is
the set of request-queue disks reached from the filesystem's device.
Everything comes from ``stat`` and ``/sys``; what is not visible is reported,
never guessed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from kvbench_core.filetiers.fsinfo import mount_of

SYS_DEV_BLOCK = "/sys/dev/block"
MINOR_BITS = 20  # the kernel's dev_t: MKDEV(major, minor) = major << 20 | minor


@dataclass(frozen=True, order=True)
class TraceDevice:
    """A disk whose requests the block tracepoints report."""

    name: str
    major: int
    minor: int

    @property
    def kernel_dev(self) -> int:
        """The value of a block tracepoint's ``dev`` field for this disk."""
        return (self.major << MINOR_BITS) | self.minor

    @property
    def numbers(self) -> str:
        return f"{self.major}:{self.minor}"


class DeviceNotTraceable(Exception):
    """The directory's requests cannot be attributed to a disk (the message says why)."""


def devices_for(path: str, sys_dev_block: str = SYS_DEV_BLOCK) -> list[TraceDevice]:
    """The disks whose request queues carry I/O to files under ``path``."""
    numbers = _filesystem_device(path)
    return sorted(set(_request_disks(numbers, Path(sys_dev_block), seen=set())))


def _filesystem_device(path: str) -> str:
    """``major:minor`` of the device under ``path``'s filesystem.

    btrfs and overlay-style filesystems report an anonymous device (major 0) in
    ``st_dev``; where the mount's source is a device node, that node is the answer.
    """
    device = os.stat(path).st_dev
    if os.major(device) != 0:
        return f"{os.major(device)}:{os.minor(device)}"
    mount = mount_of(path)
    source = mount.source if mount else ""
    try:
        node = os.stat(source) if source.startswith("/dev/") else None
    except OSError:
        node = None
    if node is not None and stat.S_ISBLK(node.st_mode):
        return f"{os.major(node.st_rdev)}:{os.minor(node.st_rdev)}"
    raise DeviceNotTraceable(f"{path} is on {mount.fstype if mount else 'a filesystem'} "
                             f"({source or 'no source'}), which has no block device")


def _request_disks(numbers: str, sys_dev_block: Path, seen: set[str]) -> list[TraceDevice]:
    link = sys_dev_block / numbers
    if not link.exists():
        raise DeviceNotTraceable(f"device {numbers} is not visible under {sys_dev_block}")
    node = link.resolve()
    disk = node.parent if (node / "partition").exists() else node
    if disk.name in seen:
        return []
    seen.add(disk.name)
    slaves = sorted((disk / "slaves").iterdir()) if (disk / "slaves").is_dir() else []
    if slaves:
        return [found for slave in slaves
                for found in _request_disks((slave / "dev").read_text().strip(), sys_dev_block, seen)]
    major, minor = (int(part) for part in (disk / "dev").read_text().split(":"))
    return [TraceDevice(disk.name, major, minor)]
