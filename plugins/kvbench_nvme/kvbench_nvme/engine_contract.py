"""What the nvme tier's I/O engines share: their settings, their contract, and moving one piece.

Every engine streams an entry in ``transfer_size`` pieces through page-aligned
buffers that are created once and reused (never one per operation), pads an
unaligned O_DIRECT tail to 4 KiB, logs every command, and records the
intervals the L4 split is taken from (``kvbench_core.filetiers.accounting``).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Protocol

from kvbench_core.contracts.backend import ByteSink, ByteSource
from kvbench_core.filetiers.accounting import Phase
from kvbench_nvme.uring import ALIGN

_ZEROS = memoryview(bytes(ALIGN))  # padding source for an unaligned O_DIRECT tail; never allocated per op


def align_up(n: int) -> int:
    """``n`` rounded up to the O_DIRECT alignment."""
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


class Unfinished(Protocol):
    """The last commands of a write ``Engine.start_write`` returned from."""

    def settle(self) -> None:
        """On the writing thread: see them through where only that thread can (an io_uring ring's
        completions); nothing where they finish by themselves (psync's pool threads)."""

    def wait(self) -> None:
        """On any thread: return once they are done; raise the first error of the entry's commands."""


class Finished:
    """The ``Unfinished`` of a write that ``start_write`` completed whole: nothing left."""

    def settle(self) -> None:
        return None

    def wait(self) -> None:
        return None


FINISHED = Finished()


class Engine(Protocol):
    """Moves all pieces of one entry; the backend opens, syncs and closes the file around it."""

    name: str
    mechanism: str  # for the declaration's driver layer
    commands_in_flight: int

    def open(self) -> None: ...

    def close(self) -> None: ...

    def write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase, log: IOLogger | None) -> None:
        ...

    def start_write(self, fd: int, key: str, source: ByteSource, size: int, phase: Phase,
                    log: IOLogger | None) -> Unfinished:
        """Start ``write`` and return once the caller may start its next entry (a pipelined write, issue 32
        §1), its last commands maybe still in flight: the ``Unfinished`` returned sees them through.  The
        fd, the source and the buffers in use must outlive its ``wait``."""
        ...

    def read(self, fd: int, key: str, sink: ByteSink, size: int, phase: Phase, log: IOLogger | None) -> None: ...


def fill_piece(source: ByteSource, view: memoryview, offset: int, n: int, direct: bool) -> int:
    """Fill ``view[:n]`` with the entry's bytes at ``offset`` (host time); returns the length to write,
    padded with zeros to 4 KiB for an unaligned O_DIRECT tail (truncated away by the backend)."""
    source.fill(offset, view[:n])
    length = n
    if direct and n % ALIGN:
        length = align_up(n)
        view[n:length] = _ZEROS[: length - n]
    return length


def consume_piece(sink: ByteSink, view: memoryview, offset: int, n: int, phase: Phase) -> None:
    """Hand a read piece to the sink (host time); one piece at a time, since sinks keep state."""
    with phase.consume_lock:
        sink.consume(offset, view[:n])


def short_read(offset: int, size: int) -> OSError:
    """The error of an entry file that ends before ``size`` bytes."""
    return OSError(errno.EIO, f"entry file ends at byte {offset}, expected {size} bytes")
