"""Finding the filesystem and block device under a directory from mountinfo and /sys."""

from __future__ import annotations

from pathlib import Path

from kvbench_core.filetiers.diskstats import DiskCounters, DiskStats
from kvbench_core.filetiers.fsinfo import block_device_of, mount_of

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw,discard
40 27 259:5 / /mnt/kv\\040cache rw,noatime shared:1 - xfs /dev/nvme1n1 rw,attr2
41 27 0:45 / /mnt/kv\\040cache rw,relatime - tmpfs tmpfs rw,size=4k
42 40 259:6 / /mnt/kv\\040cache/deeper rw - xfs /dev/nvme2n1 rw
"""


def test_the_longest_and_latest_mount_wins_and_escapes_are_decoded(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    root = mount_of("/srv/data", str(info))
    assert (root.mount_point, root.fstype, root.source, root.major_minor) == ("/", "ext4", "/dev/nvme0n1p2", "259:2")
    stacked = mount_of("/mnt/kv cache/x", str(info))
    assert (stacked.mount_point, stacked.fstype) == ("/mnt/kv cache", "tmpfs")  # mounted over the xfs
    assert mount_of("/mnt/kv cache/deeper/y", str(info)).source == "/dev/nvme2n1"
    assert mount_of("/mnt/kv cachet", str(info)).mount_point == "/"
    assert root.options == "rw,relatime,rw,discard"


def test_the_real_machine_is_described_or_reported_unknown(tmp_path: Path) -> None:
    assert mount_of(str(tmp_path)) is not None
    device = block_device_of(str(tmp_path))
    if device is not None:  # tmp_path on a block device: its counters must be readable
        assert device.name and device.major_minor.count(":") == 1
        assert DiskStats.for_path(str(tmp_path)) is not None


def test_diskstats_parses_sectors_by_major_minor(tmp_path: Path) -> None:
    stats_file = tmp_path / "diskstats"
    stats_file.write_text(
        " 259 0 nvme0n1 10 0 80 5 20 0 160 7 0 12 12 0 0 0 0\n"
        " 259 2 nvme0n1p2 4 0 16 1 6 0 48 2 0 3 3 0 0 0 0\n"
    )
    stats = DiskStats("nvme0n1p2", "259:2", str(stats_file))
    assert stats.snapshot() == DiskCounters(read_bytes=16 * 512, write_bytes=48 * 512)
    assert stats.snapshot() - stats.snapshot() == DiskCounters(0, 0)
