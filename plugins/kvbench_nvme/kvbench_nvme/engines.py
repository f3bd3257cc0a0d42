"""How the nvme tier moves an entry's pieces between its buffers and an open file: the I/O engines.

Both engines stream an entry in ``transfer_size`` pieces through page-aligned
buffers that are created once and reused (never one per operation), pad an
unaligned O_DIRECT tail to 4 KiB, log every command, and record the intervals
the L4 split is taken from (``kvbench_core.filetiers.accounting``).  They differ in how
commands are kept in flight:

* ``psync`` — synchronous ``pwrite``/``preadv`` from threads: ``queue_depth``
  threads per entry with O_DIRECT (the syscalls release the GIL), one per
  file for buffered I/O, plus one thread that fills the next piece of a
  write while the others write.
* ``io_uring`` — one thread per entry and one ring per thread
  (``kvbench_nvme.uring``): ``queue_depth`` fixed-buffer commands in flight
  per entry, buffered or not, as fio's ``iodepth`` means it; ``queue_depth + 1``
  registered buffers, so the next piece of a write is filled (and a finished
  read is consumed) while ``queue_depth`` commands are in flight.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from kvbench_core.contracts.backend import ByteSink, ByteSource
from kvbench_core.filetiers.accounting import Phase
from kvbench_nvme.buffers import Region
from kvbench_nvme.uring import ALIGN, Ring, check_locked_memory

FILL_AHEAD = 1  # write workers beyond queue_depth: one fills the next piece while queue_depth pwrites are in flight
_ZEROS = memoryview(bytes(ALIGN))  # padding source for an unaligned O_DIRECT tail; never allocated per op


def align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What an engine needs from the tier's options."""

    transfer_size: int
    queue_depth: int
    direct: bool
    concurrency: int
    thread_name: str


class IOLogger(Protocol):
    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float,
               requested: int | None = None, align: int | None = None) -> None: ...


class Engine(Protocol):
    """Moves all pieces of one entry; the backend opens, syncs and closes the file around it."""

    name: str
    mechanism: str  # for the declaration's driver layer
    commands_in_flight: int

    def open(self) -> None: ...

    def close(self) -> None: ...

    def write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase, log: IOLogger | None) -> None:
        ...

    def read(self, fd: int, key: str, sink: ByteSink, size: int, phase: Phase, log: IOLogger | None) -> None: ...


def fill_piece(source: ByteSource, view: memoryview, offset: int, n: int, direct: bool, phase: Phase) -> int:
    """Fill ``view[:n]`` with the entry's bytes at ``offset`` (host time); returns the length to write,
    padded with zeros to 4 KiB for an unaligned O_DIRECT tail (truncated away by the backend)."""
    t0 = time.perf_counter()
    source.fill(offset, view[:n])
    length = n
    if direct and n % ALIGN:
        length = align_up(n)
        view[n:length] = _ZEROS[: length - n]
    phase.host.append((t0, time.perf_counter()))
    return length


def consume_piece(sink: ByteSink, view: memoryview, offset: int, n: int, phase: Phase) -> None:
    """Hand a read piece to the sink (host time); one piece at a time, since sinks keep state."""
    with phase.consume_lock:
        t0 = time.perf_counter()
        sink.consume(offset, view[:n])
        phase.host.append((t0, time.perf_counter()))


def short_read(offset: int, size: int) -> OSError:
    return OSError(errno.EIO, f"entry file ends at byte {offset}, expected {size} bytes")


# -- psync: pwrite/preadv from threads ------------------------------------------------------------------


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

    def write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase, log: IOLogger | None) -> None:
        def piece(view: memoryview, offset: int, n: int) -> None:
            length = fill_piece(source, view, offset, n, self.settings.direct, phase)
            with phase.in_flight:
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

        self._run(phase, size, piece, workers=self.settings.queue_depth + FILL_AHEAD)

    def read(self, fd: int, key: str, sink: ByteSink, size: int, phase: Phase, log: IOLogger | None) -> None:
        direct = self.settings.direct

        def piece(view: memoryview, offset: int, n: int) -> None:
            length = align_up(n) if direct else n
            with phase.in_flight:
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

        self._run(phase, size, piece, workers=self.commands_in_flight)

    def _run(self, phase: Phase, size: int, move: Callable[[memoryview, int, int], None], workers: int) -> None:
        """Move the entry piece by piece, ``move(view, offset, n)``, on this thread and on up to
        ``workers - 1`` pool threads, each with its own buffer; they claim pieces
        from one shared counter until the entry is done or one of them failed.  Returns when all
        have stopped; re-raises the first error."""
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
        error: BaseException | None = None
        try:
            _guarded(phase, worker)
        except BaseException as exc:
            error = exc
        for future in futures:
            exc = future.exception()  # waits: the fd must outlive every helper
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


# -- io_uring: one ring per thread ----------------------------------------------------------------------


class _ThreadRing:
    """Holds one thread's ring in its ``threading.local``; its finalizer closes the ring."""

    __slots__ = ("__weakref__", "ring")

    def __init__(self, ring: Ring) -> None:
        self.ring = ring


@dataclass(slots=True)
class _Command:
    """One piece in flight in a registered buffer: ``done`` of ``length`` bytes moved so far."""

    offset: int
    n: int  # the entry's bytes in this piece
    length: int  # bytes to move: n, or n aligned up for an O_DIRECT tail
    done: int = 0
    submitted: float = 0.0


class UringEngine:
    """Fixed-buffer reads and writes through a per-thread io_uring, ``queue_depth`` in flight (module doc)."""

    name = "io_uring"
    mechanism = "io_uring (registered buffers)"

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.commands_in_flight = settings.queue_depth  # as fio's iodepth: buffered or not
        self._local = threading.local()
        self._rings: set[Ring] = set()  # every live ring, for close()
        self._rings_lock = threading.Lock()

    def open(self) -> None:
        depth, buffer = self.settings.queue_depth, align_up(self.settings.transfer_size)
        rings = max(1, self.settings.concurrency) + 1  # one per worker thread, and this (opening) thread's
        check_locked_memory(rings * (depth + 1) * buffer)  # fail now, not on a worker's first entry
        self._ring()  # this thread's ring: io_uring's absence shows at open, naming the cause

    def close(self) -> None:
        with self._rings_lock:
            rings, self._rings = self._rings, set()
        for ring in rings:
            ring.close()

    def _ring(self) -> Ring:
        """This thread's ring (a SINGLE_ISSUER ring belongs to the thread that made it).

        The ring is held through a per-thread holder whose collection closes it: when the thread ends
        (a set-up or preconditioning pool that is done), its ring and locked buffers go with it, so
        rings never pile up beyond the threads alive at once."""
        holder: _ThreadRing | None = getattr(self._local, "holder", None)
        if holder is None:
            depth = self.settings.queue_depth
            holder = _ThreadRing(Ring(entries=depth + 1, buffer_count=depth + 1,
                                      buffer_size=align_up(self.settings.transfer_size)))
            with self._rings_lock:
                self._rings.add(holder.ring)
            weakref.finalize(holder, self._release, holder.ring)
            self._local.holder = holder
        return holder.ring

    def _release(self, ring: Ring) -> None:
        with self._rings_lock:
            self._rings.discard(ring)
        ring.close()  # idempotent: close() may have closed it already

    def _discard(self, ring: Ring) -> None:
        """Drop a ring whose state is unknown (interrupted while commands were in flight)."""
        self._local.holder = None  # the holder's finalizer closes the ring

    def write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase, log: IOLogger | None) -> None:
        direct = self.settings.direct

        def prepare(ring: Ring, buffer: int, offset: int, n: int) -> _Command:
            return _Command(offset, n, fill_piece(source, ring.buffers[buffer], offset, n, direct, phase))

        self._move(True, fd, key, size, phase, log, prepare, None)

    def read(self, fd: int, key: str, sink: ByteSink, size: int, phase: Phase, log: IOLogger | None) -> None:
        direct = self.settings.direct

        def prepare(_ring: Ring, _buffer: int, offset: int, n: int) -> _Command:
            return _Command(offset, n, align_up(n) if direct else n)

        def finish(ring: Ring, buffer: int, command: _Command) -> None:
            consume_piece(sink, ring.buffers[buffer], command.offset, command.n, phase)

        self._move(False, fd, key, size, phase, log, prepare, finish)

    def _move(self, write: bool, fd: int, key: str, size: int, phase: Phase, log: IOLogger | None,
              prepare: Callable[[Ring, int, int, int], _Command],
              finish: Callable[[Ring, int, _Command], None] | None) -> None:
        """Keep ``queue_depth`` commands in flight until the entry is moved (``_Transfer``); on an error
        nothing new is submitted, everything in flight is waited for (the fd and buffers must outlive
        it), then the first error is raised."""
        ring = self._ring()
        transfer = _Transfer(ring, self.settings, write, fd, key, size, phase, log, prepare)
        try:
            transfer.run(finish)
        except BaseException:
            self._drain(ring, transfer.in_flight)
            raise
        transfer.raise_failure()

    def _drain(self, ring: Ring, in_flight: dict[int, _Command]) -> None:
        """After a Python-side failure: wait for what is in flight, or drop the ring if even that fails."""
        try:
            while in_flight:
                ring.enter(wait_for=1)
                for buffer, _ in ring.completions():
                    in_flight.pop(buffer, None)
        except BaseException:
            self._discard(ring)
            raise



class _Transfer:
    """One entry moving through one thread's ring: the state the io_uring loop keeps between completions.

    Buffer ``b`` holds at most one command, so the buffer index is the command's ``user_data``.
    With ``queue_depth`` in flight one buffer is spare: a write fills the next piece into it
    while the device works, a read submits the next piece into it before consuming the one
    that finished.  The loop's steps are methods, one call each per command: at 4 KiB commands
    on tmpfs that costs nothing measurable against one function with closures
    (``bench/uring_loop_overhead.py``, docs/PERFORMANCE.md).
    """

    __slots__ = ("depth", "ended_at", "error", "fd", "free", "in_flight", "key", "log", "next_offset", "op",
                 "phase", "prepare", "ready", "ring", "size", "transfer", "write")

    def __init__(self, ring: Ring, settings: EngineSettings, write: bool, fd: int, key: str, size: int,
                 phase: Phase, log: IOLogger | None, prepare: Callable[[Ring, int, int, int], _Command]) -> None:
        self.ring, self.write, self.fd, self.key, self.size = ring, write, fd, key, size
        self.phase, self.log, self.prepare = phase, log, prepare
        self.depth, self.transfer, self.op = settings.queue_depth, settings.transfer_size, "write" if write else "read"
        self.free = list(range(len(ring.buffers)))
        self.ready: list[tuple[int, _Command]] = []  # filled (writes) or planned, not yet submitted
        self.in_flight: dict[int, _Command] = {}
        self.next_offset = 0
        self.error: BaseException | None = None
        self.ended_at: int | None = None  # a read found the file shorter: the lowest offset where it ended

    def run(self, finish: Callable[[Ring, int, _Command], None] | None) -> None:
        """Submit, wait for completions and hand finished pieces on until nothing is left in flight."""
        ring = self.ring
        while True:
            self.top_up()
            if self.write and self.error is None and self.free and self.next_offset < self.size:
                ring.enter()  # start the queued writes, then fill the next piece while they run
                self.plan()
            if not self.in_flight:
                return
            ring.enter(wait_for=1)
            finished = self.reap()
            if finish is not None and self.error is None and self.ended_at is None:
                self.top_up()  # the spare buffer goes back to the device before the consume
                if ring.queued:
                    ring.enter()
                    finished += self.reap()
            for buffer, command in finished:
                if finish is not None and self.error is None and self.ended_at is None:
                    finish(ring, buffer, command)
                self.free.append(buffer)

    def plan(self) -> None:
        """Prepare the next piece in a free buffer (a write fills it here)."""
        buffer = self.free.pop()
        n = min(self.transfer, self.size - self.next_offset)
        self.ready.append((buffer, self.prepare(self.ring, buffer, self.next_offset, n)))
        self.next_offset += n

    def submit(self, buffer: int, command: _Command) -> None:
        self.ring.prepare(self.write, self.fd, buffer, command.done, command.length - command.done,
                          command.offset + command.done, buffer)
        command.submitted = time.perf_counter()
        self.in_flight[buffer] = command

    def top_up(self) -> None:
        """Submit planned pieces (planning more) until ``queue_depth`` are in flight or the entry is done."""
        while self.error is None and self.ended_at is None and len(self.in_flight) < self.depth and \
                (self.ready or (self.free and self.next_offset < self.size)):
            if not self.ready:
                self.plan()
            self.submit(*self.ready.pop(0))

    def reap(self) -> list[tuple[int, _Command]]:
        """Book every completion; resubmit the rest of a short transfer; return the pieces that are done."""
        finished = []
        in_flight, intervals, log = self.in_flight, self.phase.io, self.log  # locals: read once per reap
        for buffer, result in self.ring.completions():
            command = in_flight.pop(buffer)
            now = time.perf_counter()
            intervals.append((command.submitted, now))
            if log is not None and result >= 0:  # what the kernel returned; a padded tail asked for more
                log.record(self.key, self.op, command.offset + command.done, result, command.submitted, now,
                           *((command.length - command.done, ALIGN) if command.length != command.n else ()))
            if result <= 0:
                self.settle(command, result)
            command.done += max(result, 0)
            if self.error is None and result > 0 and command.done < (command.length if self.write else command.n):
                self.submit(buffer, command)  # a short transfer: the rest from where it stopped
            else:
                finished.append((buffer, command))
        return finished

    def settle(self, command: _Command, result: int) -> None:
        """A completion that moved nothing: an error, a write that wrote nothing, or a read at the file's end."""
        at = command.offset + command.done
        if result < 0:
            self.error = self.error or OSError(-result, f"io_uring {self.op} at offset {at}: {os.strerror(-result)}")
        elif self.write:
            self.error = self.error or OSError(errno.EIO, f"io_uring write wrote nothing at offset {at}")
        elif command.done < command.n:
            self.ended_at = at if self.ended_at is None else min(self.ended_at, at)

    def raise_failure(self) -> None:
        """After the loop: raise the first error, or the short read."""
        if self.error is not None:
            raise self.error
        if self.ended_at is not None:
            raise short_read(self.ended_at, self.size)

ENGINES: dict[str, Callable[[EngineSettings], Engine]] = {"psync": PsyncEngine, "io_uring": UringEngine}


def make_engine(name: str, settings: EngineSettings) -> Engine:
    return ENGINES[name](settings)

