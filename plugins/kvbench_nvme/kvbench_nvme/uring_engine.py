"""The ``io_uring`` engine: one thread per entry and one ring per thread (``kvbench_nvme.uring``).

``queue_depth`` fixed-buffer commands in flight per entry, buffered or not, as
fio's ``iodepth`` means it; ``queue_depth + 1`` registered buffers, so the next
piece of a write is filled (and a finished read is consumed) while
``queue_depth`` commands are in flight.  One entry's submit/reap loop is
``kvbench_nvme.uring_transfer``.  A pipelined write (``start_write``) leaves its
last commands on the ring: the stream's next entry's loop reaps them, within the
same ``queue_depth``, or ``settle`` does on the writing thread.
"""

from __future__ import annotations

import errno
import threading
import weakref
from collections.abc import Callable

from kvbench_core.contracts.backend import ByteSink, ByteSource
from kvbench_core.filetiers.accounting import Phase
from kvbench_nvme.engine_contract import (
    FINISHED,
    EngineSettings,
    IOLogger,
    Unfinished,
    align_up,
    consume_piece,
    fill_piece,
)
from kvbench_nvme.uring import Ring, check_locked_memory
from kvbench_nvme.uring_transfer import Command, Transfer


class _ThreadRing:
    """Holds one thread's ring in its ``threading.local``, and the pipelined write whose last commands are
    still on it (``tail``); its finalizer closes the ring."""

    __slots__ = ("__weakref__", "ring", "tail")

    def __init__(self, ring: Ring) -> None:
        self.ring = ring
        self.tail: Transfer | None = None


class _RingTail:
    """The last commands of a pipelined write on its thread's ring (``Unfinished``): only that thread reaps
    them, as its next entry runs or when it takes the entry's result (``settle``)."""

    __slots__ = ("engine", "holder", "transfer")

    def __init__(self, engine: UringEngine, holder: _ThreadRing, transfer: Transfer) -> None:
        self.engine, self.holder, self.transfer = engine, holder, transfer

    def settle(self) -> None:
        if self.engine.holder() is self.holder:  # on another thread: the writing thread reaps them
            self.engine.settle_tail(self.holder)

    def wait(self) -> None:
        self.transfer.settled.wait()
        self.transfer.raise_failure()


class UringEngine:
    """Fixed-buffer reads and writes through a per-thread io_uring, ``queue_depth`` in flight (module doc)."""

    name = "io_uring"
    mechanism = "io_uring (registered buffers)"

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.commands_in_flight = settings.queue_depth  # as fio's iodepth: buffered or not
        self._local = threading.local()
        self._rings: set[Ring] = set()  # every live ring, for close()
        self._tails: set[Transfer] = set()  # pipelined writes' last commands not yet reaped, for close()
        self._rings_lock = threading.Lock()

    def open(self) -> None:
        depth, buffer = self.settings.queue_depth, align_up(self.settings.transfer_size)
        rings = max(1, self.settings.concurrency) + 1  # one per worker thread, and this (opening) thread's
        check_locked_memory(rings * (depth + 1) * buffer)  # fail now, not on a worker's first entry
        self._ring()  # this thread's ring: io_uring's absence shows at open, naming the cause

    def close(self) -> None:
        with self._rings_lock:
            rings, self._rings = self._rings, set()
            tails, self._tails = self._tails, set()
        for tail in tails:  # a stream that never took its last result: that entry is not durable, say so
            if not tail.settled.is_set():
                tail.error = tail.error or OSError(errno.EIO, f"the tier closed with entry {tail.key!r}'s last "
                                                              "commands unreaped")
                tail.settled.set()
        for ring in rings:
            ring.close()

    def holder(self) -> _ThreadRing | None:
        """This thread's ring holder, if it has made its ring."""
        return getattr(self._local, "holder", None)

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
        self._move(True, fd, key, size, phase, log, self._filler(source), None)

    def start_write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase,
                    log: IOLogger | None) -> Unfinished:
        """Run the entry's loop until its last piece is submitted and the previous entry's commands (still
        in flight when its own ``start_write`` returned) are reaped; this entry's last ones then stay on
        the ring, counted against the depth, for the next entry's loop (or ``settle``) to reap."""
        ring = self._ring()
        holder = self._local.holder
        previous, holder.tail = holder.tail, None
        transfer = Transfer(ring, self.settings, True, fd, key, size, phase, log, self._filler(source), previous)
        try:
            transfer.run(None, pipelined=True)
        except BaseException as error:
            self._drain(transfer, error)
            raise
        self._forget_tail(previous)
        if not transfer.in_flight:
            transfer.raise_failure()
            return FINISHED
        with self._rings_lock:
            self._tails.add(transfer)
        holder.tail = transfer
        return _RingTail(self, holder, transfer)

    def _filler(self, source: ByteSource) -> Callable[[Ring, int, int, int], Command]:
        """A write's ``prepare``: fill the piece into its registered buffer."""
        direct = self.settings.direct

        def prepare(ring: Ring, buffer: int, offset: int, n: int) -> Command:
            return Command(offset, n, fill_piece(source, ring.buffers[buffer], offset, n, direct))

        return prepare

    def settle_tail(self, holder: _ThreadRing | None) -> None:
        """On the ring's thread: reap the pipelined write still on it, so the ring is the caller's alone."""
        if holder is None or holder.tail is None:
            return
        tail, holder.tail = holder.tail, None
        try:
            tail.see_through()
        except BaseException:
            self._discard(holder.ring)
            raise
        finally:
            self._forget_tail(tail)

    def _forget_tail(self, tail: Transfer | None) -> None:
        if tail is not None:
            with self._rings_lock:
                self._tails.discard(tail)

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
        it), then the first error is raised.  A pipelined write still on the ring is reaped first."""
        self.settle_tail(self.holder())
        transfer = Transfer(self._ring(), self.settings, write, fd, key, size, phase, log, prepare)
        try:
            transfer.run(finish)
        except BaseException as error:
            self._drain(transfer, error)
            raise
        transfer.raise_failure()

    def _drain(self, transfer: Transfer, error: BaseException) -> None:
        """After a Python-side failure: submit nothing more of this entry and wait for what is in flight,
        the previous entry's completions booked on it (so it completes as it would have); drop the ring
        if even that fails."""
        transfer.error = transfer.error or error
        previous = transfer.previous
        try:
            while transfer.in_flight or transfer.previous is not None:
                transfer.ring.enter(wait_for=1)
                transfer.reap()
        except BaseException as failure:
            if previous is not None and not previous.settled.is_set():
                previous.error = previous.error or failure
                previous.settled.set()
            self._discard(transfer.ring)
            raise
        finally:
            self._forget_tail(previous)
