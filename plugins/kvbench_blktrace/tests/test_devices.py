"""From a directory to the disks whose request queues carry its I/O (a fake /sys, and this machine's)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kvbench_blktrace.devices import DeviceNotTraceable, TraceDevice, _request_disks, devices_for


def make_disk(sys_root: Path, name: str, numbers: str, partitions: dict[str, str] | None = None,
              slaves: list[str] | None = None) -> Path:
    """A /sys/devices/... disk directory plus its /sys/dev/block/M:m links, like the kernel's layout."""
    disk = sys_root / "devices" / name
    disk.mkdir(parents=True)
    (disk / "dev").write_text(numbers + "\n")
    links = sys_root / "dev" / "block"
    links.mkdir(parents=True, exist_ok=True)
    (links / numbers).symlink_to(disk)
    for part, part_numbers in (partitions or {}).items():
        (disk / part).mkdir()
        (disk / part / "dev").write_text(part_numbers + "\n")
        (disk / part / "partition").write_text("1\n")
        (links / part_numbers).symlink_to(disk / part)
    if slaves is not None:
        (disk / "slaves").mkdir()
        for slave in slaves:
            target = next(p for p in (sys_root / "devices").rglob(slave) if (p / "dev").exists())
            (disk / "slaves" / slave).symlink_to(target)
    return disk


def test_a_partition_is_traced_as_its_whole_disk(tmp_path: Path) -> None:
    make_disk(tmp_path, "nvme0n1", "259:0", partitions={"nvme0n1p2": "259:2"})
    assert _request_disks("259:2", tmp_path / "dev" / "block", set()) == [TraceDevice("nvme0n1", 259, 0)]


def test_a_device_mapper_volume_is_traced_as_the_disks_under_it(tmp_path: Path) -> None:
    make_disk(tmp_path, "sda", "8:0", partitions={"sda1": "8:1"})
    make_disk(tmp_path, "sdb", "8:16")
    make_disk(tmp_path, "dm-0", "253:0", slaves=["sda1", "sdb"])
    found = _request_disks("253:0", tmp_path / "dev" / "block", set())
    assert sorted(found) == [TraceDevice("sda", 8, 0), TraceDevice("sdb", 8, 16)]


def test_an_unknown_device_says_so(tmp_path: Path) -> None:
    (tmp_path / "dev" / "block").mkdir(parents=True)
    with pytest.raises(DeviceNotTraceable, match="7:3 is not visible"):
        _request_disks("7:3", tmp_path / "dev" / "block", set())


def test_this_machines_tmp_directory(tmp_path: Path) -> None:
    device = os.stat(tmp_path).st_dev
    if os.major(device) == 0 or not Path("/sys/dev/block").is_dir():
        pytest.skip(f"{tmp_path} is not on a block device visible in /sys (major {os.major(device)})")
    disks = devices_for(str(tmp_path))
    assert disks and all(Path(f"/sys/dev/block/{d.numbers}").exists() for d in disks)


def test_a_filesystem_without_a_block_device_says_which() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.major(os.stat(shm).st_dev) != 0:
        pytest.skip("/dev/shm is not a memory filesystem here")
    with pytest.raises(DeviceNotTraceable, match="no block device"):
        devices_for(str(shm))
