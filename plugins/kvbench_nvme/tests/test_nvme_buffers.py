"""Transfer buffers: page aligned, 2 MiB aligned and eligible for transparent huge pages from 1 MiB, so a
1 MiB command is one physically contiguous segment at the device (kvbench_nvme/buffers.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kvbench_nvme.buffers import HUGE_PAGE, PAGE, Region

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def smaps_entry(address: int) -> str:
    """This process's /proc/self/smaps block of the mapping that contains ``address``."""
    text = Path("/proc/self/smaps").read_text()
    for match in re.finditer(r"^([0-9a-f]+)-([0-9a-f]+) .*?(?=^[0-9a-f]+-|\Z)", text, re.M | re.S):
        if int(match.group(1), 16) <= address < int(match.group(2), 16):
            return match.group(0)
    raise LookupError(hex(address))


@pytest.mark.parametrize("size", [4096, 64 << 10, (1 << 20) - 4096, 1 << 20, 5 << 20])
def test_a_region_is_aligned_sized_and_writable(size: int) -> None:
    region = Region(size)
    try:
        assert region.address % (HUGE_PAGE if size >= 1 << 20 else PAGE) == 0
        assert len(region.view) == size
        region.view[-1:] = b"x"
        assert bytes(region.view[-1:]) == b"x"
    finally:
        region.close()


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="transparent huge pages are off")
def test_a_large_region_is_private_memory_eligible_for_huge_pages() -> None:
    """A shared anonymous mapping (Python's mmap default) is shmem and gets no huge pages; this one must."""
    region = Region(1 << 20)
    try:
        region.view[:] = bytes(len(region.view))
        entry = smaps_entry(region.address)
        assert "/dev/zero" not in entry.splitlines()[0]
        assert re.search(r"^THPeligible:\s+1$", entry, re.M), entry
    finally:
        region.close()
