"""The L4 host/device split for one entry's I/O phase, honest under parallel I/O.

Every thread working on an entry records intervals: ``io`` (one per
pread/pwrite command) and ``syscall`` (open, ftruncate, fsync, close).  With
``queue_depth`` threads they overlap, so the split is taken on the wall clock:

* ``device`` = time during which at least one device syscall of the entry
  was in flight (the union of ``io`` and ``syscall`` intervals), i.e. how long
  the entry waited on the storage, not the sum over threads;
* ``host`` = the rest of the entry's wall time, ``total - device``: preparing
  (``source.fill``, ``sink.consume``, the page-cache drop), kvbench's Python
  between the calls, thread hand-off, CPU contention, everything that is not
  waiting on the device (docs/metrics.md, L4); host work hidden behind I/O
  costs the entry nothing, so it is not charged;

so ``host + device == total`` for every entry, and the verdict's shares add up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from kvbench_core.contracts.backend import IOTiming

T = TypeVar("T")

Interval = tuple[float, float]


def covered(intervals: Iterable[Interval]) -> float:
    """Length of the union of ``[start, end)`` intervals (seconds of wall clock they cover)."""
    total = 0.0
    run_start = run_end = None
    for start, end in sorted(intervals):
        if run_end is None or start > run_end:
            if run_end is not None:
                total += run_end - run_start
            run_start, run_end = start, end
        elif end > run_end:
            run_end = end
    if run_end is not None:
        total += run_end - run_start
    return total


class Phase:
    """Intervals and state shared by the threads moving one entry.

    ``list.append`` is atomic under the GIL, so threads record without a lock.
    ``failed`` tells the other threads to stop after one of them raised.
    ``consume_lock`` serialises ``sink.consume``: sinks keep state (a checksum,
    a verify scratch buffer) and are not required to be thread-safe.
    """

    __slots__ = ("consume_lock", "failed", "io", "syscall")

    def __init__(self) -> None:
        self.io: list[Interval] = []
        self.syscall: list[Interval] = []
        self.failed = False
        self.consume_lock = threading.Lock()

    def timed_syscall(self, call: Callable[..., T], *args: object) -> T:
        """Run a non-data syscall (open, fsync, ftruncate, close) as device time."""
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.syscall.append((start, time.perf_counter()))

    def timing(self, start: float, end: float, nbytes: int) -> IOTiming:
        total = end - start
        device = min(covered(self.io + self.syscall), total)
        return IOTiming(total=total, host=total - device, device=device, nbytes=nbytes, commands=len(self.io))
