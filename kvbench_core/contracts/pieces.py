"""A backend base that derives ``write``/``read``/``read_range`` and their timing from two piece commands.

Most tiers move an entry as a run of commands of at most ``transfer_size`` bytes:
one ``pwrite``, one ``SETRANGE``, one HTTP part.  The streaming, the piece loop,
the host/device split and the command count are the same for all of them, so a
tier written on ``PieceBackend`` implements only what differs (as fsspec's
``AbstractFileSystem`` derives most of its API from a handful of methods):

* ``store_piece(key, offset, data, size)`` — one device command writing ``data`` at ``offset``;
* ``load_piece(key, offset, out)`` — one device command filling ``out`` from ``offset``;
* ``delete(key)``;

and, when the medium needs them, ``begin_write``/``end_write`` around an
entry's pieces (create a file, publish a dict entry, fsync).  Time inside the
piece commands and the begin/end hooks is device time; filling from the source
and handing to the sink is host time, so ``host + device <= total`` holds.
Each thread reuses one piece buffer for the whole run (``piece_buffer``:
override it for aligned, pinned or registered memory), so no payload buffer is
allocated per operation.  Tiers with deeper pipelines (several commands in
flight per entry) implement ``StorageBackend`` directly, as the nvme tier does.
"""

from __future__ import annotations

import abc
import threading
import time
from typing import Any

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, StorageBackend


class PieceBackend(StorageBackend):
    """Implement ``store_piece``, ``load_piece`` and ``delete``; the entry-level calls are derived."""

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._buffers = threading.local()

    def begin_write(self, key: str, size: int) -> None:
        """Before an entry's first piece (create the file, allocate the slot)."""

    def end_write(self, key: str, size: int) -> None:
        """After its last piece (fsync, publish the entry so readers see it whole)."""

    @abc.abstractmethod
    def store_piece(self, key: str, offset: int, data: memoryview, size: int) -> None:
        """One device command: write ``data`` at ``offset`` of the ``size``-byte entry ``key``."""

    @abc.abstractmethod
    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        """One device command: fill ``out`` with the entry's bytes at ``offset`` (KeyError if absent)."""

    def piece_buffer(self) -> memoryview:
        """This thread's reusable piece buffer of ``transfer_size`` bytes, allocated on first use."""
        buffer = getattr(self._buffers, "view", None)
        if buffer is None or len(buffer) != self.transfer_size:
            buffer = self._buffers.view = memoryview(bytearray(self.transfer_size))
        return buffer

    def write(self, key: str, source: ByteSource) -> IOTiming:
        buffer, size = self.piece_buffer(), source.size
        start = time.perf_counter()
        device = self._timed(self.begin_write, key, size)
        commands = 0
        for offset in range(0, size, self.transfer_size):
            piece = buffer[:min(self.transfer_size, size - offset)]
            source.fill(offset, piece)
            device += self._timed(self.store_piece, key, offset, piece, size)
            commands += 1
        device += self._timed(self.end_write, key, size)
        return self._timing(start, device, size, commands)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        buffer = self.piece_buffer()
        start = time.perf_counter()
        device, commands = 0.0, 0
        for offset in range(0, size, self.transfer_size):
            piece = buffer[:min(self.transfer_size, size - offset)]
            device += self._timed(self.load_piece, key, offset, piece)
            sink.consume(offset, piece)
            commands += 1
        return self._timing(start, device, size, commands)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        for at in range(0, len(out), self.transfer_size):
            self.load_piece(key, offset + at, out[at:at + self.transfer_size])

    @staticmethod
    def _timed(call: Any, *args: Any) -> float:
        begin = time.perf_counter()
        call(*args)
        return time.perf_counter() - begin

    @staticmethod
    def _timing(start: float, device: float, nbytes: int, commands: int) -> IOTiming:
        total = time.perf_counter() - start
        return IOTiming(total=total, host=max(total - device, 0.0), device=min(device, total), nbytes=nbytes,
                        commands=max(commands, 1))
