"""The ``io_uring`` engine: one thread per entry and one ring per thread (``kvbench_nvme.uring``).

``queue_depth`` fixed-buffer commands in flight per entry, buffered or not, as
fio's ``iodepth`` means it; ``queue_depth + 1`` registered buffers, so the next
piece of a write is filled (and a finished read is consumed) while
``queue_depth`` commands are in flight.  One entry's submit/reap loop is
``kvbench_nvme.uring_transfer``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from kvbench_core.contracts.backend import ByteSink, ByteSource
from kvbench_core.filetiers.accounting import Phase
from kvbench_nvme.engine_contract import EngineSettings, IOLogger, align_up, consume_piece, fill_piece
from kvbench_nvme.uring import Ring, check_locked_memory
from kvbench_nvme.uring_transfer import Command, Transfer


class _ThreadRing:
    """Holds one thread's ring in its ``threading.local``; its finalizer closes the ring."""

    __slots__ = ("__weakref__", "ring")

    def __init__(self, ring: Ring) -> None:
        self.ring = ring


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

        def prepare(ring: Ring, buffer: int, offset: int, n: int) -> Command:
            return Command(offset, n, fill_piece(source, ring.buffers[buffer], offset, n, direct))

        self._move(True, fd, key, size, phase, log, prepare, None)

    def start_write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase,
                    log: IOLogger | None) -> Callable[[], None]:
        self.write(fd, key, source, size, phase, log)
        return _nothing_left

    def read(self, fd: int, key: str, sink: ByteSink, size: int, phase: Phase, log: IOLogger | None) -> None:
        direct = self.settings.direct

        def prepare(_ring: Ring, _buffer: int, offset: int, n: int) -> Command:
            return Command(offset, n, align_up(n) if direct else n)

        def finish(ring: Ring, buffer: int, command: Command) -> None:
            consume_piece(sink, ring.buffers[buffer], command.offset, command.n, phase)

        self._move(False, fd, key, size, phase, log, prepare, finish)

    def _move(self, write: bool, fd: int, key: str, size: int, phase: Phase, log: IOLogger | None,
              prepare: Callable[[Ring, int, int, int], Command],
              finish: Callable[[Ring, int, Command], None] | None) -> None:
        """Keep ``queue_depth`` commands in flight until the entry is moved (``Transfer``); on an error
        nothing new is submitted, everything in flight is waited for (the fd and buffers must outlive
        it), then the first error is raised."""
        ring = self._ring()
        transfer = Transfer(ring, self.settings, write, fd, key, size, phase, log, prepare)
        try:
            transfer.run(finish)
        except BaseException:
            self._drain(ring, transfer.in_flight)
            raise
        transfer.raise_failure()

    def _drain(self, ring: Ring, in_flight: dict[int, Command]) -> None:
        """After a Python-side failure: wait for what is in flight, or drop the ring if even that fails."""
        try:
            while in_flight:
                ring.enter(wait_for=1)
                for buffer, _ in ring.completions():
                    in_flight.pop(buffer, None)
        except BaseException:
            self._discard(ring)
            raise


def _nothing_left() -> None:
    """The rest of a write that ``start_write`` completed whole."""
