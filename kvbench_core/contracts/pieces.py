"""The backend kit: a tier that implements a handful of piece commands gets the rest of the contract.

Most tiers move an entry as a run of commands: one ``pwrite``, one ``SET`` of a part, one HTTP part.  The
streaming, the piece loop, the host/device split, the command count, the per-command I/O-log record (which
is also where a run's drain limit cancels an operation) and the clean-up of a write that failed half-way
are the same for all of them, so a tier written on ``PieceBackend`` implements only what differs (as
fsspec's ``AbstractFileSystem`` derives most of its API from a few methods):

* ``store_piece(handle, offset, data)`` — one device command writing ``data`` at ``offset`` of an entry;
* ``load_piece(handle, offset, out)`` — one device command filling ``out`` from ``offset`` (or returning
  the bytes in a buffer of its own, a network reply, which the kit hands on without a copy);
* ``delete(key)``;

and, when the medium needs them, each operation's life: ``begin_write(key, size)`` returns the handle the
pieces go to (an open file, an upload id, a connection and the entry's key names; the key itself by
default), ``end_write(handle)`` makes the entry durable and visible whole (fsync, complete, publish), and
``abort_write(handle)`` undoes a write that did not end (the piece loop calls it in a ``finally`` when a
source, a command or a cancellation raised), so no half entry is ever left behind; ``begin_read(key,
size)``, ``end_read(handle)`` and ``abort_read(handle)`` do the same for a read (take and give back a
pooled connection, open and close a file).

Time inside the piece commands and the handle's calls is device time; filling from the source and handing
to the sink is host time, so ``host + device <= total`` holds.  A command that does host work of its own
before it waits (packing a request) returns those seconds from ``store_piece``: they are booked as host
time and the command's log record starts after them.  A tier whose medium is process memory declares
``piece_time = "host"``: its commands are the CPU's own copies, booked as host time with device 0 (the cpu
tier); with ``fills_in_place`` its ``piece_view`` hands out the entry's own memory, the source fills it
there and that fill is the write command (no second copy through a piece buffer).

A piece is ``piece_size`` bytes (``transfer_size`` by default; a Redis part may be far larger than what a
source fills at once, so the kit fills and consumes a piece in calls of at most ``transfer_size``).  A tier
that keeps several commands of one operation in flight (pipelined on one connection, queued on a device)
sets ``writes_in_flight`` / ``reads_in_flight``: its ``store_piece`` then only issues the command, and
``request_piece`` issues a load; ``finish_piece`` waits for the oldest command still in flight (commands
finish in the order they were issued) and returns a load's bytes.  Each command is still logged once, from
its issue to its finish.

Each thread reuses one piece buffer for the whole run (``piece_buffer``: override it for aligned, pinned
or registered memory), so no payload buffer is allocated per operation.  ``transfer_size`` comes from the
``transfer_size`` option when the tier's schema has one (``TRANSFER_SIZE_OPTION``).  The nvme tier, whose
engines keep a queue full across entries, implements ``StorageBackend`` directly.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, StorageBackend
from kvbench_core.contracts.buffers import consume_pieces, fill_pieces
from kvbench_core.contracts.units import size_schema

#: The schema of a tier's ``transfer_size`` option: put it in ``options_schema["properties"]``.
TRANSFER_SIZE_OPTION: dict[str, Any] = {**size_schema("bytes per piece command, e.g. 1MiB"), "default": "1MiB"}

_EMPTY = memoryview(bytearray(0))  # the one piece of an empty entry


class PieceBackend(StorageBackend):
    """Implement ``store_piece``, ``load_piece`` and ``delete``; the entry-level calls are derived."""

    #: Where the piece commands' time is booked: ``device`` (a syscall, a round trip) or ``host`` (the
    #: medium is process memory, a command is a memcpy: there is no device to wait for).
    piece_time: ClassVar[Literal["device", "host"]] = "device"
    #: True when ``piece_view`` hands out the entry's own memory: the source's fill is the write command.
    fills_in_place: ClassVar[bool] = False
    #: Bytes one piece command moves; 0: ``transfer_size``.
    piece_size: int = 0
    #: Commands of one write / one read that may be in flight at once; 1: each returns when it is done.
    writes_in_flight: int = 1
    reads_in_flight: int = 1

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)  # StorageBackend reads the transfer_size option
        self._buffers = threading.local()

    # -- what a tier implements ---------------------------------------------------------------

    def begin_write(self, key: str, size: int) -> Any:
        """Before an entry's first piece (create the file, start the upload): the handle its pieces go to."""
        return key

    @abc.abstractmethod
    def store_piece(self, handle: Any, offset: int, data: memoryview) -> float | None:
        """One device command: write ``data`` at ``offset`` of the entry ``begin_write`` opened (with
        ``writes_in_flight`` > 1: issue it, ``finish_piece`` waits for it).  May return the seconds of it
        that were host work before the wait (packing the command); None: none."""

    def end_write(self, handle: Any) -> int | None:
        """After the last piece: make the entry durable and visible whole (fsync, complete, publish).  May
        return how many data commands it issued beyond the pieces (unlinking an older entry's tail), for
        ``IOTiming.commands``; None: none."""
        return None

    def abort_write(self, handle: Any) -> None:
        """A write that did not end (its source, a command or a cancellation raised): drop what it stored
        and release the handle.  Must not raise for a handle that stored nothing yet, and stay cheap: on a
        cancellation the drain waits for it (slow clean-up, deleting a half-written file, belongs in
        ``close``, which runs after the drain)."""

    def begin_read(self, key: str, size: int | None) -> Any:
        """Before a read's first piece (``size`` None for a range read): the handle its loads use."""
        return key

    def end_read(self, handle: Any) -> None:
        """After a read's last piece: release the handle."""

    def abort_read(self, handle: Any) -> None:
        """A read that did not end (a command, the sink or a cancellation raised): release the handle in
        whatever state the failure left it (a connection with replies still in flight is not reused)."""
        self.end_read(handle)

    @abc.abstractmethod
    def load_piece(self, handle: Any, offset: int, out: memoryview) -> memoryview | None:
        """One device command: fill ``out`` with the entry's bytes at ``offset`` (KeyError if absent), or
        return them in a buffer of the command's own (``len(out)`` bytes)."""

    def request_piece(self, handle: Any, offset: int, size: int) -> None:
        """With ``reads_in_flight`` > 1: issue the load of ``size`` bytes at ``offset``; ``finish_piece``
        returns them."""
        raise NotImplementedError(f"{self.name} declares reads_in_flight {self.reads_in_flight} but no request_piece")

    def finish_piece(self, handle: Any, offset: int, size: int) -> memoryview | None:
        """With commands in flight: wait for the oldest (the piece at ``offset``, ``size`` bytes); a load's
        bytes."""
        raise NotImplementedError(f"{self.name} keeps commands in flight but has no finish_piece")

    def piece_buffer(self, size: int = 0) -> memoryview:
        """This thread's reusable piece buffer, ``size`` bytes (a piece by default), allocated on first use
        and grown, never shrunk, when a larger piece needs it."""
        size = size or self._piece()
        buffer = getattr(self._buffers, "view", None)
        if buffer is None or len(buffer) < size:
            buffer = self._buffers.view = memoryview(bytearray(size))
        return buffer[:size]

    def piece_view(self, handle: Any, offset: int, size: int) -> memoryview:
        """Where the piece at ``offset`` is filled before ``store_piece``: this thread's piece buffer; with
        ``fills_in_place``, the entry's own memory behind ``handle``."""
        return self.piece_buffer(size)

    # -- what the kit derives -----------------------------------------------------------------

    def write(self, key: str, source: ByteSource) -> IOTiming:
        size = source.size
        start = time.perf_counter()
        handle = self.begin_write(key, size)
        flight = _Flight(self, key, "write", handle, self.writes_in_flight, time.perf_counter() - start)
        ended = False
        try:
            for offset, length in self._pieces(size):
                piece = self.piece_view(handle, offset, length) if length else _EMPTY
                if self.fills_in_place:  # the fill writes the medium: it is the command
                    flight.issue(offset, length, self._fill_and_store, source, handle, offset, piece)
                else:
                    fill_pieces(source, offset, piece, self.transfer_size)
                    flight.issue(offset, length, self.store_piece, handle, offset, piece)
            flight.drain()
            begin = time.perf_counter()
            flight.commands += self.end_write(handle) or 0
            flight.device += time.perf_counter() - begin
            ended = True
        finally:
            if not ended:
                self.abort_write(handle)
        return self._timing(start, flight.device, size, flight.commands)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        handle = self.begin_read(key, size)
        flight = _Flight(self, key, "read", handle, self.reads_in_flight, time.perf_counter() - start)
        ended = False
        try:
            pieces = self._pieces(size)
            if self.reads_in_flight > 1:
                flight.stream(pieces, lambda offset, data: consume_pieces(sink, offset, data, self.transfer_size))
            else:
                for offset, length in pieces:
                    piece = self.piece_buffer(length) if length else _EMPTY
                    got = flight.issue(offset, length, self.load_piece, handle, offset, piece)
                    consume_pieces(sink, offset, piece if got is None else got, self.transfer_size)
            ended = True
        finally:
            (self.end_read if ended else self.abort_read)(handle)
        return self._timing(start, flight.device, size, flight.commands)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        """One load per piece the range touches, cut at the entry's piece boundaries (a Redis part, a
        memory block), into the caller's buffer."""
        if not len(out):
            return
        handle = self.begin_read(key, None)
        flight = _Flight(self, key, "read", handle, 1, 0.0)
        ended = False
        try:
            piece_size, at = self._piece(), 0
            while at < len(out):
                length = min(piece_size - (offset + at) % piece_size, len(out) - at)
                piece = out[at:at + length]
                got = flight.issue(offset + at, length, self.load_piece, handle, offset + at, piece)
                if got is not None:
                    piece[:] = got
                at += length
            ended = True
        finally:
            (self.end_read if ended else self.abort_read)(handle)

    def _piece(self) -> int:
        return self.piece_size or self.transfer_size

    def _pieces(self, size: int) -> Iterator[tuple[int, int]]:
        """(offset, length) of each piece of an entry of ``size`` bytes; an empty entry is one empty piece
        (a command that creates it, or finds it absent)."""
        piece = self._piece()
        if size == 0:
            yield 0, 0
        for offset in range(0, size, piece):
            yield offset, min(piece, size - offset)

    def _fill_and_store(self, source: ByteSource, handle: Any, offset: int, piece: memoryview) -> None:
        fill_pieces(source, offset, piece, self.transfer_size)
        self.store_piece(handle, offset, piece)

    def _command(self, key: str, op: str, offset: int, piece: memoryview, call: Any, *args: Any) -> float:
        """Run one device command and log it: the run's per-command latency and its cancellation point."""
        begin = time.perf_counter()
        call(*args)
        end = time.perf_counter()
        if self.context.io_log is not None:
            self.context.io_log.record(key, op, offset, len(piece), begin, end)
        return end - begin

    def _timing(self, start: float, device: float, nbytes: int, commands: int) -> IOTiming:
        total = time.perf_counter() - start
        if self.piece_time == "host":
            device = 0.0
        return IOTiming(total=total, host=max(total - device, 0.0), device=min(device, total), nbytes=nbytes,
                        commands=max(commands, 1))


class _Flight:
    """One operation's piece commands: issued, at most ``limit`` in flight, each finished in issue order,
    timed (device time, less the host seconds a command names) and logged once, from issue to finish."""

    def __init__(self, backend: PieceBackend, key: str, op: str, handle: Any, limit: int, device: float) -> None:
        self.backend, self.key, self.op, self.handle, self.limit = backend, key, op, handle, max(1, limit)
        self.device = device  # seconds so far: the handle's begin
        self.commands = 0
        self._pending: deque[tuple[int, int, float]] = deque()  # (offset, bytes, issued at) in flight

    def issue(self, offset: int, length: int, call: Callable[..., Any], *args: Any) -> Any:
        """Issue one command (``call(*args)``); in flight when the limit allows, else done (logged here)."""
        while len(self._pending) >= self.limit > 1:
            self.finish()
        begin = time.perf_counter()
        got = call(*args)
        end = time.perf_counter()
        host = got if self.op == "write" and got else 0.0
        self.device += end - begin - host
        self.commands += 1
        if self.limit > 1:
            self._pending.append((offset, length, begin + host))
            return None
        self._log(offset, length, begin + host, end)
        return got

    def finish(self) -> memoryview | None:
        """Wait for the oldest command in flight; a load's bytes."""
        offset, length, issued = self._pending.popleft()
        begin = time.perf_counter()
        got = self.backend.finish_piece(self.handle, offset, length)
        end = time.perf_counter()
        self.device += end - begin
        self._log(offset, length, issued, end)
        return got

    def drain(self) -> None:
        while self._pending:
            self.finish()

    def stream(self, pieces: Iterator[tuple[int, int]], consume: Callable[[int, memoryview], None]) -> None:
        """A read with loads in flight: up to the limit requested ahead of the piece being consumed."""
        for offset, length in pieces:
            if len(self._pending) >= self.limit:
                self._consume_oldest(consume)
            self.issue(offset, length, self.backend.request_piece, self.handle, offset, length)
        while self._pending:
            self._consume_oldest(consume)

    def _consume_oldest(self, consume: Callable[[int, memoryview], None]) -> None:
        offset = self._pending[0][0]
        got = self.finish()
        assert got is not None, f"{self.backend.name}: finish_piece returned no bytes for a load"
        consume(offset, got)

    def _log(self, offset: int, length: int, begin: float, end: float) -> None:
        if self.backend.context.io_log is not None:
            self.backend.context.io_log.record(self.key, self.op, offset, length, begin, end)
