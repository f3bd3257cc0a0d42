"""Transfer buffers for the nvme tier's engines: page aligned, and physically contiguous where it counts.

A command's buffer reaches the device as a scatter list with one segment per
physically contiguous run of pages, and a device takes at most
``/sys/block/<disk>/queue/max_segments`` of them per request (254 on virtio_blk,
often 33–127 on NVMe).  A 1 MiB buffer of scattered 4 KiB pages is 256
segments, so the block layer split every 1 MiB O_DIRECT command of kvbench
into two requests, where fio's (whose buffers happen to be contiguous) stayed
one: measured on the development VM, 128 requests for 64 × 1 MiB preads from
a plain buffer, 64 from a huge-page-backed one, and 64 for fio
(docs/PERFORMANCE.md).  So buffers of 1 MiB and more are private anonymous
memory aligned to 2 MiB with ``MADV_HUGEPAGE``: with transparent huge pages
on (``always`` or ``madvise``) each 2 MiB is one contiguous page, and
io_uring coalesces registered huge pages into single segments as well.  The
cost is resident memory rounded up to 2 MiB per buffer region; where THP is
off or no huge page is free, the kernel quietly uses 4 KiB pages and nothing
else changes.  Smaller buffers stay 4 KiB pages (they fit the segment limit
of common devices, and rounding them to 2 MiB would multiply their memory).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
HUGE_FROM = 1 << 20  # buffers this large get huge-page-backed memory


class Region:
    """``size`` bytes of private anonymous memory at a page-aligned (2 MiB-aligned from 1 MiB) ``address``."""

    def __init__(self, size: int) -> None:
        huge = size >= HUGE_FROM and hasattr(mmap, "MADV_HUGEPAGE")
        # A huge page needs a whole aligned 2 MiB inside the hinted range: hint whole huge pages
        span = -(-size // HUGE_PAGE) * HUGE_PAGE if huge else size
        slack = HUGE_PAGE if huge else 0
        self._mapping = mmap.mmap(-1, span + slack, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor: ctypes.c_char | None = ctypes.c_char.from_buffer(self._mapping)
        base = ctypes.addressof(self._anchor)
        start = -base % HUGE_PAGE if huge else 0
        if huge:
            with contextlib.suppress(OSError):  # THP compiled out: plain pages, as without the hint
                self._mapping.madvise(mmap.MADV_HUGEPAGE, start, span)
        self.address = base + start
        self.view = memoryview(self._mapping)[start:start + size]

    def close(self) -> None:
        """Unmap, unless a piece view is still held elsewhere (then it is unmapped when collected)."""
        self.view.release()
        self._anchor = None
        with contextlib.suppress(BufferError):
            self._mapping.close()
