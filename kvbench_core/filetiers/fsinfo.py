"""Which filesystem and which block device hold a directory.

The tier's declaration must say what the numbers were measured on (ext4 on an
NVMe namespace is not xfs on a RAID of SATA disks), and the diskstats check
must know whose counters to read.  Everything comes from ``/proc/self/mountinfo``
and ``/sys``: no external tools, no root.  What is not visible (a container
without ``/sys``, a network filesystem, tmpfs) is ``None``, never guessed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"
SYS_DEV_BLOCK = "/sys/dev/block"

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of mountinfo: the mount that serves a path."""

    mount_point: str
    fstype: str
    source: str
    major_minor: str
    options: str  # per-mount options (ro, noatime) then the filesystem's own (discard, data=ordered)


@dataclass(frozen=True, slots=True)
class BlockDevice:
    """The block device under a filesystem, with what ``/sys`` says about it.

    ``name`` is the device the filesystem sits on (``nvme0n1p2``, ``dm-0``, ``vda``);
    queue attributes and the model belong to the whole ``disk`` (``nvme0n1``).
    """

    name: str
    disk: str
    major_minor: str
    model: str | None
    driver: str | None
    rotational: bool | None
    logical_block_size: int | None
    scheduler: str | None
    slaves: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "disk": self.disk, "major_minor": self.major_minor, "model": self.model,
            "driver": self.driver, "rotational": self.rotational,
            "logical_block_size": self.logical_block_size, "scheduler": self.scheduler,
            "slaves": list(self.slaves),
        }


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as ``\\ooo`` octal escapes."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def _is_under(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, mountinfo: str = MOUNTINFO) -> Mount | None:
    """The mount serving ``path`` (longest matching mount point; the later of two stacked mounts)."""
    real = os.path.realpath(path)
    best: Mount | None = None
    try:
        with open(mountinfo) as lines:
            for line in lines:
                left, sep, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if not sep or len(fields) < 6 or len(tail) < 3:
                    continue
                mount_point = _unescape(fields[4])
                if not _is_under(real, mount_point):
                    continue
                if best is None or len(mount_point) >= len(best.mount_point):
                    best = Mount(mount_point=mount_point, fstype=tail[0], source=_unescape(tail[1]),
                                 major_minor=fields[2], options=f"{fields[5]},{tail[2]}")
    except OSError:
        return None
    return best


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _major_minor(path: str, mount: Mount | None) -> str | None:
    """``major:minor`` of the block device holding ``path``, if it has one in ``/sys``.

    ``st_dev`` is right for ext4/xfs; btrfs and overlay report an anonymous
    device, so fall back to the mount's source when that is a device node.
    """
    st_dev = os.stat(path).st_dev
    candidate = f"{os.major(st_dev)}:{os.minor(st_dev)}"
    if os.path.exists(os.path.join(SYS_DEV_BLOCK, candidate)):
        return candidate
    if mount is not None and mount.source.startswith("/dev/"):
        try:
            rdev = os.stat(mount.source).st_rdev
        except OSError:
            return None
        candidate = f"{os.major(rdev)}:{os.minor(rdev)}"
        if rdev and os.path.exists(os.path.join(SYS_DEV_BLOCK, candidate)):
            return candidate
    return None


def _driver(disk_dir: str) -> str | None:
    """The kernel driver behind the disk: ``device/driver`` (virtio, SCSI) or one level up (NVMe)."""
    for link in ("device/driver", "device/device/driver"):
        target = os.path.join(disk_dir, link)
        if os.path.islink(target):
            return os.path.basename(os.readlink(target))
    return None


def block_device_of(path: str) -> BlockDevice | None:
    """The block device holding ``path``; None for tmpfs, overlay without a device, NFS…"""
    mount = mount_of(path)
    major_minor = _major_minor(path, mount)
    if major_minor is None:
        return None
    device_dir = os.path.realpath(os.path.join(SYS_DEV_BLOCK, major_minor))
    is_partition = os.path.exists(os.path.join(device_dir, "partition"))
    disk_dir = os.path.dirname(device_dir) if is_partition else device_dir
    model = _read(os.path.join(disk_dir, "device/model")) or _read(os.path.join(disk_dir, "dm/name"))
    rotational = _read(os.path.join(disk_dir, "queue/rotational"))
    block_size = _read(os.path.join(disk_dir, "queue/logical_block_size"))
    scheduler = _read(os.path.join(disk_dir, "queue/scheduler"))
    active = re.search(r"\[(\S+)\]", scheduler or "")
    slaves_dir = os.path.join(disk_dir, "slaves")
    slaves = tuple(sorted(os.listdir(slaves_dir))) if os.path.isdir(slaves_dir) else ()
    return BlockDevice(
        name=os.path.basename(device_dir),
        disk=os.path.basename(disk_dir),
        major_minor=major_minor,
        model=model,
        driver=_driver(disk_dir),
        rotational=None if rotational is None else rotational == "1",
        logical_block_size=int(block_size) if block_size and block_size.isdigit() else None,
        scheduler=active.group(1) if active else scheduler,
        slaves=slaves,
    )


def describe_location(path: str) -> dict[str, object]:
    """Filesystem and device of ``path`` for the tier declaration (``None`` where not visible)."""
    mount = mount_of(path)
    device = block_device_of(path)
    return {
        "filesystem": None if mount is None else {
            "type": mount.fstype, "mount_point": mount.mount_point, "source": mount.source,
            "options": mount.options,
        },
        "block_device": None if device is None else device.as_dict(),
    }
