"""What every entry transfer of the tier shares: part size, helper threads, reused buffers, timing.

An entry of at most ``part_size`` bytes is one request; a larger one is one
request per part, up to ``max_concurrency`` parts of one operation in flight at
once (the calling thread plus helpers from a shared pool).  The source and the
sink are never called concurrently: the parts' HTTP requests overlap, their
fill/consume calls take turns.  Each part goes through this thread's reused
part-sized buffer, so memory is bounded by ``part_size x max_concurrency`` per
operation.

The helpers are daemon threads of the tier's own (``Helpers``), not a ``ThreadPoolExecutor``'s: the
interpreter joins those at exit, and a part stuck on a server that stopped answering ends only at
``read_timeout`` x ``max_attempts``, so the process outlived the close's cleanup limit by minutes.  The
close waits for them at most until its deadline and says how many it left (``stop``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
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
    helpers: Helpers | None = None
    #: Multipart uploads begun and not yet completed or aborted: object name -> upload id (what a cleanup
    #: that could not reach the server lists as left over).
    uploads: dict[str, str] = field(default_factory=dict)

    def start(self, threads: int) -> None:
        """Start the pool of ``threads`` helpers that carry the parts beyond the caller's own."""
        if self.max_concurrency > 1:
            self.helpers = Helpers(threads, f"kvbench-s3-{self.tier_name}")

    def stop(self, wait_s: float = 0.0) -> int:
        """Let the helpers go, waiting at most ``wait_s`` for the parts they still carry (one stuck on a
        frozen server ends at its read timeout, not before: the close's deadline must not wait on it); how
        many were still busy then, abandoned.  Safe to call twice."""
        helpers, self.helpers = self.helpers, None
        return helpers.stop(wait_s) if helpers is not None else 0

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

        pool = self.helpers  # once: the close may stop them meanwhile (then submit refuses)
        helpers = [pool.submit(drain) for _ in range(min(count, self.max_concurrency) - 1)] if pool else []
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


class Helpers:
    """Up to ``threads`` daemon threads, started as work needs them, running submitted work in order: what
    ``each_part`` needs of a pool, and a ``stop`` that waits for busy threads only as long as it is told to."""

    def __init__(self, threads: int, name: str) -> None:
        self._work: queue.SimpleQueue[tuple[Future[None], Callable[[], None]] | None] = queue.SimpleQueue()
        self._limit, self._name = max(1, threads), name
        self._threads = self._queued = self._busy = 0
        self._idle = threading.Condition()  # guards the counts and _stopped
        self._stopped = False  # no work is queued behind the threads' stop signals

    def submit(self, work: Callable[[], None]) -> Future[None]:
        future: Future[None] = Future()
        with self._idle:
            if self._stopped:
                raise RuntimeError("the tier's helper threads are stopped")
            self._work.put((future, work))
            self._queued += 1
            if self._queued + self._busy > self._threads and self._threads < self._limit:
                self._threads += 1
                threading.Thread(target=self._serve, name=f"{self._name}_{self._threads}", daemon=True).start()
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, work = item
            with self._idle:
                self._queued -= 1
                if not future.set_running_or_notify_cancel():
                    continue  # cancelled while queued
                self._busy += 1
            try:
                work()
            except BaseException as error:  # handed to the submitter through the future
                future.set_exception(error)
            else:
                future.set_result(None)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def stop(self, wait_s: float) -> int:
        """Cancel what is queued, let the threads end once idle, wait at most ``wait_s`` for the busy ones;
        the number still busy."""
        with self._idle:
            self._stopped = True
            threads = self._threads
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
                with self._idle:
                    self._queued -= 1
        for _ in range(threads):
            self._work.put(None)
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout=max(wait_s, 0.0))
            return self._busy


def timing(start: float, host: float, device: float, nbytes: int, commands: int) -> IOTiming:
    """IOTiming for an operation; overlapping parts' summed times are scaled to fit the wall time."""
    total = time.perf_counter() - start
    busy = host + device
    if busy > total:
        scale = total / busy * (1 - 1e-9)  # the margin keeps the rounded sum of the scaled parts <= total
        host, device = host * scale, device * scale
    return IOTiming(total, host, device, nbytes, commands)
