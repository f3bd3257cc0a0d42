"""One entry moving through one thread's io_uring: the submit / reap loop of the ``io_uring`` engine."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kvbench_core.filetiers.accounting import Phase
from kvbench_nvme.engine_contract import EngineSettings, IOLogger, short_read
from kvbench_nvme.uring import ALIGN, Ring


@dataclass(slots=True)
class Command:
    """One piece in flight in a registered buffer: ``done`` of ``length`` bytes moved so far."""

    offset: int
    n: int  # the entry's bytes in this piece
    length: int  # bytes to move: n, or n aligned up for an O_DIRECT tail
    done: int = 0
    submitted: float = 0.0


class Transfer:
    """One entry moving through one thread's ring: the state the io_uring loop keeps between completions.

    Buffer ``b`` holds at most one command, so the buffer index is the command's ``user_data``.
    With ``queue_depth`` in flight one buffer is spare: a write fills the next piece into it
    while the device works, a read submits the next piece into it before consuming the one
    that finished.  The loop's steps are methods, one call each per command: at 4 KiB commands
    on tmpfs that costs nothing measurable against one function with closures
    (``bench/uring_loop_overhead.py``, docs/PERFORMANCE.md).

    Reads go to the kernel one per ``io_uring_enter``: adjacent reads submitted together run under one
    block plug and merge into larger device requests (1 MiB commands reached a virtio disk as 2-4 MiB
    ones and read at 0.70x fio at depth 16, issue 32), so the device would not see the transfer size the
    run declares.  fio's default ``iodepth_batch_submit=1`` does the same.  Writes are left batched:
    their device-request count already matched fio's in the same bench (about 2,300 for 2,048 commands
    with fio and kvbench alike, the journal and fsyncs included).
    """

    __slots__ = ("depth", "ended_at", "error", "fd", "free", "in_flight", "key", "log", "next_offset", "op",
                 "phase", "prepare", "previous", "ready", "ring", "settled", "size", "transfer", "write")

    def __init__(self, ring: Ring, settings: EngineSettings, write: bool, fd: int, key: str, size: int,
                 phase: Phase, log: IOLogger | None, prepare: Callable[[Ring, int, int, int], Command],
                 previous: Transfer | None = None) -> None:
        self.ring, self.write, self.fd, self.key, self.size = ring, write, fd, key, size
        self.phase, self.log, self.prepare = phase, log, prepare
        self.depth, self.transfer, self.op = settings.queue_depth, settings.transfer_size, "write" if write else "read"
        #: The stream's previous entry, its last commands still in flight on this ring (a pipelined write):
        #: they hold their buffers and count against the depth until this loop reaps them.
        self.previous = previous
        self.settled = threading.Event()  # set once this entry's own commands are all reaped (a pipelined tail)
        self.free = [buffer for buffer in range(len(ring.buffers)) if previous is None or
                     buffer not in previous.in_flight]
        self.ready: list[tuple[int, Command]] = []  # filled (writes) or planned, not yet submitted
        self.in_flight: dict[int, Command] = {}
        self.next_offset = 0
        self.error: BaseException | None = None
        self.ended_at: int | None = None  # a read found the file shorter: the lowest offset where it ended

    def run(self, finish: Callable[[Ring, int, Command], None] | None, pipelined: bool = False) -> None:
        """Submit, wait for completions and hand finished pieces on until nothing is left in flight, or
        (``pipelined``) until every piece is submitted and the previous entry's commands are reaped."""
        ring = self.ring
        while True:
            self.top_up()
            if self.write and self.error is None and self.free and self.next_offset < self.size:
                ring.enter()  # start the queued writes, then fill the next piece while they run
                self.plan()
            if self.over(pipelined):
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

    def over(self, pipelined: bool) -> bool:
        """Whether the loop is done: nothing left in flight, or (``pipelined``) every piece submitted and
        nothing failed, what is left being the device's; either way the previous entry's commands reaped.
        The last queued pieces go to the device now, not with the next entry's."""
        issued = self.error is None and self.ended_at is None and not self.ready and self.next_offset >= self.size
        if self.previous is not None or (self.in_flight and not (pipelined and issued)):
            return False
        if self.ring.queued:
            self.ring.enter()
        return True

    def plan(self) -> None:
        """Prepare the next piece in a free buffer (a write fills it here)."""
        buffer = self.free.pop()
        n = min(self.transfer, self.size - self.next_offset)
        self.ready.append((buffer, self.prepare(self.ring, buffer, self.next_offset, n)))
        self.next_offset += n

    def submit(self, buffer: int, command: Command) -> None:
        self.ring.prepare(self.write, self.fd, buffer, command.done, command.length - command.done,
                          command.offset + command.done, buffer)
        command.submitted = time.perf_counter()
        self.in_flight[buffer] = command

    def top_up(self) -> None:
        """Submit planned pieces (planning more) until ``queue_depth`` are in flight or the entry is done."""
        previous = self.previous
        while self.error is None and self.ended_at is None and \
                len(self.in_flight) + (len(previous.in_flight) if previous is not None else 0) < self.depth and \
                (self.ready or (self.free and self.next_offset < self.size)):
            if not self.ready:
                self.plan()
            if not self.write and self.ring.queued:
                self.ring.enter()  # one read per submission: several under one block plug merge (class doc)
            self.submit(*self.ready.pop(0))

    def reap(self) -> list[tuple[int, Command]]:
        """Book every completion (the previous entry's go to it); return this entry's pieces that are done."""
        finished = []
        in_flight = self.in_flight
        for buffer, result in self.ring.completions():
            command = in_flight.pop(buffer, None)
            if command is None:
                self.reap_previous(buffer, result)
            elif self.book(buffer, command, result):
                finished.append((buffer, command))
        return finished

    def book(self, buffer: int, command: Command, result: int) -> bool:
        """Book one completion of this entry's; resubmit the rest of a short transfer; whether the piece is done."""
        now = time.perf_counter()
        self.phase.io.append((command.submitted, now))
        if self.log is not None and result >= 0:  # what the kernel returned; a padded tail asked for more
            self.log.record(self.key, self.op, command.offset + command.done, result, command.submitted, now,
                            *((command.length - command.done, ALIGN) if command.length != command.n else ()))
        if result <= 0:
            self.settle(command, result)
        command.done += max(result, 0)
        if self.error is None and result > 0 and command.done < (command.length if self.write else command.n):
            self.submit(buffer, command)  # a short transfer: the rest from where it stopped
            return False
        return True

    def reap_previous(self, buffer: int, result: int) -> None:
        """A completion of the previous entry's: booked on it; its buffer is this entry's once the piece is
        done, and once its last command is, the previous entry may become durable (``settled``)."""
        previous = self.previous
        if previous is None:
            raise OSError(errno.EIO, f"io_uring completion for buffer {buffer}, which no command holds")
        if previous.book(buffer, previous.in_flight.pop(buffer), result):
            self.free.append(buffer)
        if not previous.in_flight:
            self.previous = None
            previous.settled.set()

    def see_through(self) -> None:
        """Reap this entry's last commands (a pipelined tail: nothing else is on the ring), then say so."""
        try:
            while self.in_flight:
                self.ring.enter(wait_for=1)
                for buffer, result in self.ring.completions():
                    self.book(buffer, self.in_flight.pop(buffer), result)
        except BaseException as error:
            self.error = self.error or error
            raise
        finally:
            self.settled.set()

    def settle(self, command: Command, result: int) -> None:
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
