"""The ``psync`` engine: synchronous ``pwrite``/``preadv`` from threads.

``queue_depth`` threads per entry with O_DIRECT (the syscalls release the
GIL), one per file for buffered I/O, plus one thread that fills the next piece
of a write while the others write.  A stream's commands share its
``queue_depth`` across entries (``slots``): a pipelined write returns once every
piece is claimed, its pool threads' last ``pwrite``s still running beside the
next entry's.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from kvbench_core.contracts.backend import ByteSink, ByteSource
from kvbench_core.filetiers.accounting import Phase
from kvbench_nvme.buffers import Region
from kvbench_nvme.engine_contract import (
    EngineSettings,
    IOLogger,
    Unfinished,
    align_up,
    consume_piece,
    fill_piece,
    short_read,
)
from kvbench_nvme.uring import ALIGN

FILL_AHEAD = 1  # write workers beyond queue_depth: one fills the next piece while queue_depth pwrites are in flight


class PsyncEngine:
    """Synchronous ``pwrite``/``preadv`` calls, ``queue_depth`` threads per O_DIRECT entry (module doc)."""

    name = "psync"
    mechanism = "pread/pwrite syscalls"

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        # Buffered writes to one file serialise on the inode lock (ext4 and xfs alike) and the device
        # sees writeback, not these calls; buffered reads are fed by readahead, which several threads
        # claiming pieces of one file only disturb (docs/PERFORMANCE.md).  So queue_depth is O_DIRECT's.
        self.commands_in_flight = settings.queue_depth if settings.direct else 1
        self._buffers = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    def open(self) -> None:
        helpers = max(1, self.settings.concurrency) * (self.settings.queue_depth + FILL_AHEAD - 1)
        if helpers:
            self._pool = ThreadPoolExecutor(max_workers=helpers, thread_name_prefix=self.settings.thread_name)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def buffer(self) -> memoryview:
        """This thread's reusable, page-aligned transfer buffer (created on the thread's first use)."""
        region = getattr(self._buffers, "region", None)
        if region is None:
            region = Region(align_up(self.settings.transfer_size))  # huge-page backed from 1 MiB (buffers.py)
            self._buffers.region = region
        return region.view

    def slots(self) -> threading.Semaphore:
        """This stream's command slots (its thread's, made on first use): at most ``commands_in_flight``
        ``pwrite``/``preadv`` calls at once across its entries, so a pipelined write's last commands and
        the next entry's share the depth, as fio's ``iodepth`` counts a job's (a write has one more
        thread, filling the next piece meanwhile)."""
        slots = getattr(self._buffers, "slots", None)
        if slots is None:
            slots = self._buffers.slots = threading.Semaphore(self.commands_in_flight)
        return slots

    def write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase, log: IOLogger | None) -> None:
        self.start_write(fd, key, source, size, phase, log).wait()

    def start_write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase,
                    log: IOLogger | None) -> Unfinished:
        slots = self.slots()

        def piece(view: memoryview, offset: int, n: int) -> None:
            length = fill_piece(source, view, offset, n, self.settings.direct)
            with slots:
                done = 0
                while done < length:
                    t1 = time.perf_counter()
                    written = os.pwrite(fd, view[done:length], offset + done)
                    t2 = time.perf_counter()
                    phase.io.append((t1, t2))
                    if log is not None:  # an O_DIRECT tail is written zero-padded to ALIGN
                        log.record(key, "write", offset + done, written, t1, t2,
                                   *((length - done, ALIGN) if length != n else ()))
                    if written <= 0:
                        raise OSError(errno.EIO, f"pwrite wrote nothing at offset {offset + done}")
                    done += written

        return self._start(phase, size, piece, workers=self.settings.queue_depth + FILL_AHEAD)

    def read(self, fd: int, key: str, sink: ByteSink, size: int, phase: Phase, log: IOLogger | None) -> None:
        direct, slots = self.settings.direct, self.slots()

        def piece(view: memoryview, offset: int, n: int) -> None:
            length = align_up(n) if direct else n
            with slots:
                got = 0
                while got < n:
                    t1 = time.perf_counter()
                    count = os.preadv(fd, [view[got:length]], offset + got)
                    t2 = time.perf_counter()
                    phase.io.append((t1, t2))
                    if log is not None:  # what preadv returned; an O_DIRECT tail asked for the aligned length
                        log.record(key, "read", offset + got, count, t1, t2,
                                   *((length - got, ALIGN) if length != n else ()))
                    if count <= 0:
                        raise short_read(offset + got, size)
                    got += count
            consume_piece(sink, view, offset, n, phase)

        self._start(phase, size, piece, workers=self.commands_in_flight).wait()

    def _start(self, phase: Phase, size: int, move: Callable[[memoryview, int, int], None],
               workers: int) -> Unfinished:
        """Move the entry piece by piece, ``move(view, offset, n)``, on this thread and on up to
        ``workers - 1`` pool threads, each with its own buffer; they claim pieces
        from one shared counter until the entry is done or one of them failed.  Returns when this
        thread finds no piece left to claim, the pool threads maybe still moving their last ones
        (``_PoolThreads`` waits for them).  An error on this thread is raised at once, after that wait."""
        pieces = itertools.count()
        transfer = self.settings.transfer_size

        def worker() -> None:
            view = self.buffer()
            for index in pieces:
                offset = index * transfer
                if offset >= size or phase.failed:
                    return
                move(view, offset, min(transfer, size - offset))

        helpers = min(workers, -(-size // transfer)) - 1
        futures: list[Future[None]] = []
        if helpers > 0 and self._pool is not None:
            futures = [self._pool.submit(_guarded, phase, worker) for _ in range(helpers)]
        rest = _PoolThreads(futures)
        try:
            _guarded(phase, worker)
        except BaseException as error:
            rest.error = error
            rest.wait()
        return rest


class _PoolThreads:
    """The pool threads still moving an entry's last pieces; ``wait`` joins them and raises the first error
    (this thread's own, else theirs): the fd must outlive every one of them."""

    __slots__ = ("error", "futures")

    def __init__(self, futures: list[Future[None]]) -> None:
        self.futures = futures
        self.error: BaseException | None = None

    def settle(self) -> None:
        return None  # they finish by themselves

    def wait(self) -> None:
        error = self.error
        for future in self.futures:
            exc = future.exception()  # waits
            if error is None and exc is not None:
                error = exc
        if error is not None:
            raise error


def _guarded(phase: Phase, worker: Callable[[], None]) -> None:
    try:
        worker()
    except BaseException:
        phase.failed = True
        raise
