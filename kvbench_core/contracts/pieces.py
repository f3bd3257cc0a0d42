"""The backend kit: a tier that implements a handful of piece commands gets the rest of the contract.

Most tiers move an entry as a run of commands of at most ``transfer_size`` bytes: one ``pwrite``, one
``SETRANGE``, one HTTP part.  The streaming, the piece loop, the host/device split, the command count, the
per-command I/O-log record (which is also where a run's drain limit cancels an operation) and the clean-up
of a write that failed half-way are the same for all of them, so a tier written on ``PieceBackend``
implements only what differs (as fsspec's ``AbstractFileSystem`` derives most of its API from a few
methods):

* ``store_piece(handle, offset, data)`` — one device command writing ``data`` at ``offset`` of an entry;
* ``load_piece(key, offset, out)`` — one device command filling ``out`` from ``offset``;
* ``delete(key)``;

and, when the medium needs them, the write handle's life: ``begin_write(key, size)`` returns the handle
the pieces go to (an open file, an upload id, a buffer being filled; the key itself by default),
``end_write(handle)`` makes the entry durable and visible whole (fsync, complete, publish), and
``abort_write(handle)`` undoes a write that did not end (the piece loop calls it in a ``finally`` when a
source, a command or a cancellation raised), so no half entry is ever left behind.

Time inside the piece commands and the handle's calls is device time; filling from the source and handing
to the sink is host time, so ``host + device <= total`` holds.  A tier whose medium is process memory
declares ``piece_time = "host"``: its commands are the CPU's own copies, booked as host time with device 0
(the cpu tier); with ``fills_in_place`` its ``piece_view`` hands out the entry's own memory, the source
fills it there and that fill is the write command (no second copy through a piece buffer).

Each thread reuses one piece buffer for the whole run (``piece_buffer``: override it for aligned, pinned
or registered memory), so no payload buffer is allocated per operation.  ``transfer_size`` comes from the
``transfer_size`` option when the tier's schema has one (``TRANSFER_SIZE_OPTION``).  Tiers with deeper
pipelines (several commands in flight per entry) implement ``StorageBackend`` directly, as the nvme tier
does.
"""

from __future__ import annotations

import abc
import threading
import time
from typing import Any, ClassVar, Literal

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, StorageBackend
from kvbench_core.contracts.units import size_schema

#: The schema of a tier's ``transfer_size`` option: put it in ``options_schema["properties"]``.
TRANSFER_SIZE_OPTION: dict[str, Any] = {**size_schema("bytes per piece command, e.g. 1MiB"), "default": "1MiB"}


class PieceBackend(StorageBackend):
    """Implement ``store_piece``, ``load_piece`` and ``delete``; the entry-level calls are derived."""

    #: Where the piece commands' time is booked: ``device`` (a syscall, a round trip) or ``host`` (the
    #: medium is process memory, a command is a memcpy: there is no device to wait for).
    piece_time: ClassVar[Literal["device", "host"]] = "device"
    #: True when ``piece_view`` hands out the entry's own memory: the source's fill is the write command.
    fills_in_place: ClassVar[bool] = False

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)  # StorageBackend reads the transfer_size option
        self._buffers = threading.local()

    def begin_write(self, key: str, size: int) -> Any:
        """Before an entry's first piece (create the file, start the upload): the handle its pieces go to."""
        return key

    @abc.abstractmethod
    def store_piece(self, handle: Any, offset: int, data: memoryview) -> None:
        """One device command: write ``data`` at ``offset`` of the entry ``begin_write`` opened."""

    def end_write(self, handle: Any) -> None:
        """After the last piece: make the entry durable and visible whole (fsync, complete, publish)."""

    def abort_write(self, handle: Any) -> None:
        """A write that did not end (its source, a command or a cancellation raised): drop what it stored
        and release the handle.  Must not raise for a handle that stored nothing yet, and stay cheap: on a
        cancellation the drain waits for it (slow clean-up, deleting a half-written file, belongs in
        ``close``, which runs after the drain)."""

    @abc.abstractmethod
    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        """One device command: fill ``out`` with the entry's bytes at ``offset`` (KeyError if absent)."""

    def piece_buffer(self) -> memoryview:
        """This thread's reusable piece buffer of ``transfer_size`` bytes, allocated on first use."""
        buffer = getattr(self._buffers, "view", None)
        if buffer is None or len(buffer) != self.transfer_size:
            buffer = self._buffers.view = memoryview(bytearray(self.transfer_size))
        return buffer

    def piece_view(self, handle: Any, offset: int, size: int) -> memoryview:
        """Where the piece at ``offset`` is filled before ``store_piece``: this thread's piece buffer; with
        ``fills_in_place``, the entry's own memory behind ``handle``."""
        return self.piece_buffer()[:size]

    def write(self, key: str, source: ByteSource) -> IOTiming:
        size = source.size
        start = time.perf_counter()
        handle = self.begin_write(key, size)
        device, commands, ended = time.perf_counter() - start, 0, False
        try:
            for offset in range(0, size, self.transfer_size):
                piece = self.piece_view(handle, offset, min(self.transfer_size, size - offset))
                if self.fills_in_place:  # the fill writes the medium: it is the command
                    device += self._command(key, "write", offset, piece, self._fill_and_store, source, handle,
                                            offset, piece)
                else:
                    source.fill(offset, piece)
                    device += self._command(key, "write", offset, piece, self.store_piece, handle, offset, piece)
                commands += 1
            begin = time.perf_counter()
            self.end_write(handle)
            device += time.perf_counter() - begin
            ended = True
        finally:
            if not ended:
                self.abort_write(handle)
        return self._timing(start, device, size, commands)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        buffer = self.piece_buffer()
        start = time.perf_counter()
        device, commands = 0.0, 0
        for offset in range(0, size, self.transfer_size):
            piece = buffer[:min(self.transfer_size, size - offset)]
            device += self._command(key, "read", offset, piece, self.load_piece, key, offset, piece)
            sink.consume(offset, piece)
            commands += 1
        return self._timing(start, device, size, commands)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        for at in range(0, len(out), self.transfer_size):
            piece = out[at:at + self.transfer_size]
            self._command(key, "read", offset + at, piece, self.load_piece, key, offset + at, piece)

    def _fill_and_store(self, source: ByteSource, handle: Any, offset: int, piece: memoryview) -> None:
        source.fill(offset, piece)
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
