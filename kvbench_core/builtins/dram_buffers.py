"""The DRAM tier's memory: the block arena entries live in, and the ring of buffers reads restore into.

Both are allocated once and recycled, as a serving engine's KV pool and its restore buffers are.

The arena.  Freshly mapped memory is expensive to touch (a page fault per 4 KiB; on VMs the kernel's
fault path runs at tens to hundreds of MB/s), and numpy returns large arrays to the OS on free.  So
blocks are recycled through a free list, and ``reserve`` touches the tier's whole capacity at set-up
(the ``prefault`` option): a short run's writes then land in faulted memory and the tier measures memory
bandwidth, not the kernel's page-fault path, which is what it reported before (a 10 s run: 401,069
minor faults, 0.151 GB/s "DRAM" writes).

The restore ring.  A restore copies a stored block into the memory the engine reads the KV from.  Into
one small reused buffer, that destination stays in the last-level cache and the copy runs up to 1.4x
faster than into fresh memory, which a GPU-side restore (or a CPU engine's KV cache, larger than any
cache) never sees.  So reads copy into a ring of buffers together twice the size of the last-level
cache, taken first-in first-out: a slot comes round again only after a ring's worth of other copies
has pushed it out of the cache.
"""

from __future__ import annotations

import collections
import glob
import threading

import numpy as np

BLOCK = 4 << 20  # DRAM tier block (and transfer) size
FALLBACK_CACHE_BYTES = 32 << 20  # the last-level cache assumed where sysfs does not say
RING_CACHES = 2  # the restore ring is this many last-level caches large


def last_level_cache_bytes() -> int:
    """The largest CPU cache this machine reports (sysfs, one cache's size, not the sum over sockets)."""
    largest = 0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        digits, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
        if digits.isdigit():
            largest = max(largest, int(digits) * unit)
    return largest or FALLBACK_CACHE_BYTES


class BlockArena:
    """Fixed-size blocks recycled through a free list (module docstring)."""

    def __init__(self, block_bytes: int = BLOCK) -> None:
        self.block_bytes = block_bytes
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def reserve(self, count: int) -> None:
        """Allocate and touch ``count`` more blocks now, so writes do not fault them in later."""
        for _ in range(count):
            block = np.empty(self.block_bytes, dtype=np.uint8)
            block.fill(0)  # a write to every page: each is faulted in here, not in a measured write
            with self._lock:
                self._free.append(block)

    def take(self, count: int) -> list[np.ndarray]:
        with self._lock:
            reused = [self._free.pop() for _ in range(min(count, len(self._free)))]
        return reused + [np.empty(self.block_bytes, dtype=np.uint8) for _ in range(count - len(reused))]

    def give(self, blocks: list[np.ndarray]) -> None:
        """Return whole blocks to the free list (exact-size tails are simply dropped)."""
        with self._lock:
            self._free.extend(block for block in blocks if block.shape[0] == self.block_bytes)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


class RestoreRing:
    """``slots`` destination blocks handed out first-in first-out, one per copy in progress.

    A slot is held only while one block is copied into it and handed to the sink, so threads never share
    a slot's bytes; when more threads copy at once than there are slots, the ring grows by one.
    """

    def __init__(self, slots: int, block_bytes: int = BLOCK) -> None:
        self.slots, self.block_bytes = slots, block_bytes
        self._made = 0
        self._free: collections.deque[np.ndarray] = collections.deque()
        self._lock = threading.Lock()

    @classmethod
    def larger_than_cache(cls, block_bytes: int = BLOCK) -> RestoreRing:
        """A ring of ``RING_CACHES`` times the last-level cache (at least two blocks)."""
        return cls(max(2, -(-RING_CACHES * last_level_cache_bytes() // block_bytes)), block_bytes)

    @property
    def nbytes(self) -> int:
        return self.slots * self.block_bytes

    def fill(self) -> None:
        """Make (and touch) every slot now, so the first pass of reads does not fault them in."""
        while self._made < self.slots:
            self.give(self._new())

    def take(self) -> np.ndarray:
        with self._lock:
            if self._free and self._made >= self.slots:
                return self._free.popleft()
        return self._new()

    def give(self, slot: np.ndarray) -> None:
        self._free.append(slot)  # deque.append is atomic: no lock needed

    def clear(self) -> None:
        """Let the slots go (the tier closed): twice the last-level cache is about 1 GB on a large server,
        which a closed tier must not keep until a garbage collection finds it."""
        with self._lock:
            self._free.clear()
            self._made = 0

    def _new(self) -> np.ndarray:
        slot = np.empty(self.block_bytes, dtype=np.uint8)
        slot.fill(0)
        with self._lock:
            self._made += 1
        return slot
