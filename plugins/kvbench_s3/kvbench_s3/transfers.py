"""What every entry transfer of the tier shares: part size, helper threads, reused buffers, timing.

An entry of at most ``part_size`` bytes is one request; a larger one is one
request per part, up to ``max_concurrency`` parts of one operation in flight at
once (the calling thread plus helpers from a shared pool).  The source and the
sink are never called concurrently: the parts' HTTP requests overlap, their
fill/consume calls take turns.  Each part goes through this thread's reused
part-sized buffer, so memory is bounded by ``part_size x max_concurrency`` per
operation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.contracts.buffers import ThreadBuffers
from kvbench_s3.client import S3Client


@dataclass
class Transfers:
    """One tier's way of moving entries as parts through its client."""

    client: S3Client
    bucket: str
    part_size: int
    max_concurrency: int
    tier_name: str
    io_log: Any  # the run's per-command log (BackendContext.io_log), or None
    buffers: ThreadBuffers = field(default_factory=ThreadBuffers)  # one part-sized buffer per thread
    helpers: ThreadPoolExecutor | None = None
    #: Multipart uploads begun and not yet completed or aborted: object name -> upload id (what a cleanup
    #: that could not reach the server lists as left over).
    uploads: dict[str, str] = field(default_factory=dict)

    def start(self, threads: int) -> None:
        """Start the pool of ``threads`` helpers that carry the parts beyond the caller's own."""
        if self.max_concurrency > 1:
            self.helpers = ThreadPoolExecutor(threads, thread_name_prefix=f"kvbench-s3-{self.tier_name}")

    def stop(self) -> None:
        """Let the helpers go without waiting for one stuck on a frozen server (a part's request ends at
        its read timeout, not before: the close's deadline must not wait on it); safe to call twice."""
        if self.helpers is not None:
            self.helpers.shutdown(wait=False, cancel_futures=True)
            self.helpers = None

    def part_count(self, size: int) -> int:
        """How many parts an entry of ``size`` bytes is moved as."""
        return -(-size // self.part_size)

    def part_length(self, index: int, size: int) -> int:
        """The length of part ``index`` of an entry of ``size`` bytes (the last one may be short)."""
        return min(self.part_size, size - index * self.part_size)

    def log(self, key: str, op: str, offset: int, length: int, started: float) -> None:
        """Report one request, from send to reply, to the run's I/O log as a device command."""
        if self.io_log is not None:
            self.io_log.record(key, op, offset, length, started, time.perf_counter())

    def each_part(self, count: int, work: Callable[[int], tuple[float, float]]) -> tuple[float, float]:
        """``work(i)`` for every part, at most ``max_concurrency`` at once; summed (host, device).

        The calling thread is one of the workers, so progress never waits on a free pool thread;
        after a failure no new part starts, and the call returns only when no part is in flight.
        """
        indices, lock, failed = iter(range(count)), threading.Lock(), threading.Event()
        totals = [0.0, 0.0]

        def drain() -> None:
            while not failed.is_set():
                with lock:
                    index = next(indices, None)
                if index is None:
                    return
                try:
                    host, device = work(index)
                except BaseException:
                    failed.set()
                    raise
                with lock:
                    totals[0] += host
                    totals[1] += device

        helpers = [self.helpers.submit(drain) for _ in range(min(count, self.max_concurrency) - 1)
                   ] if self.helpers else []
        try:
            drain()
        finally:
            for helper in helpers:  # a helper still queued behind other operations has nothing left to do
                helper.cancel()
            wait(helpers)
        for helper in helpers:
            if not helper.cancelled():
                helper.result()
        return totals[0], totals[1]


def timing(start: float, host: float, device: float, nbytes: int, commands: int) -> IOTiming:
    """IOTiming for an operation; overlapping parts' summed times are scaled to fit the wall time."""
    total = time.perf_counter() - start
    busy = host + device
    if busy > total:
        scale = total / busy * (1 - 1e-9)  # the margin keeps the rounded sum of the scaled parts <= total
        host, device = host * scale, device * scale
    return IOTiming(total, host, device, nbytes, commands)
