"""One entry moving through one thread's io_uring: the submit / reap loop of the ``io_uring`` engine."""

from __future__ import annotations

import errno
import os
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
    """

    __slots__ = ("depth", "ended_at", "error", "fd", "free", "in_flight", "key", "log", "next_offset", "op",
                 "phase", "prepare", "ready", "ring", "size", "transfer", "write")

    def __init__(self, ring: Ring, settings: EngineSettings, write: bool, fd: int, key: str, size: int,
                 phase: Phase, log: IOLogger | None, prepare: Callable[[Ring, int, int, int], Command]) -> None:
        self.ring, self.write, self.fd, self.key, self.size = ring, write, fd, key, size
        self.phase, self.log, self.prepare = phase, log, prepare
        self.depth, self.transfer, self.op = settings.queue_depth, settings.transfer_size, "write" if write else "read"
        self.free = list(range(len(ring.buffers)))
        self.ready: list[tuple[int, Command]] = []  # filled (writes) or planned, not yet submitted
        self.in_flight: dict[int, Command] = {}
        self.next_offset = 0
        self.error: BaseException | None = None
        self.ended_at: int | None = None  # a read found the file shorter: the lowest offset where it ended

    def run(self, finish: Callable[[Ring, int, Command], None] | None) -> None:
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

    def submit(self, buffer: int, command: Command) -> None:
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

    def reap(self) -> list[tuple[int, Command]]:
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
