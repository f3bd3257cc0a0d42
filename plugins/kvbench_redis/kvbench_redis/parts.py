"""The Redis tier's data path: an entry's parts pipelined on one connection, one part in memory at a time.

Not through redis-py's ``Pipeline``, which keeps every command until ``execute`` and so would hold the
whole entry in memory.  A write fills part i into the thread's reused buffer, sends it (``sendall``
returns once the kernel holds the bytes, so the buffer is free again), fills part i+1 while the server
stores part i, and reads the replies at the end.  A read keeps a bounded number of GETs in flight and
hands each reply to the sink.  Memory per operation is therefore one part, whatever the entry size.

L4 split: ``host`` is filling/consuming the bytes and packing SET commands; ``device`` is time in socket
sends and reply reads (network round trip plus server), which includes redis-py's reply parsing because
redis-py cannot hand a reply out without it.  Each SET/GET/GETRANGE is logged as one device command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource
from kvbench_core.contracts.buffers import ThreadBuffers, consume_pieces, fill_pieces
from kvbench_core.contracts.errors import EntryGone

#: Largest piece handed to ``source.fill`` / ``sink.consume``: parts may be far larger than the
#: payload generator's piece limit, so they are filled and consumed in pieces of this size.
PIECE = 16 << 20
#: Bytes of GET replies a read keeps requested ahead of the part it consumes (at least two parts).
READ_AHEAD = 64 << 20


class PartPipeline:
    """Sends and receives the parts of one entry on a connection the caller holds."""

    def __init__(self, part_size: int, expiry: tuple[Any, ...], context: BackendContext) -> None:
        self.part_size = part_size
        self.expiry = expiry  # ("PX", ms) on every SET, or nothing
        self.context = context  # its io_log, when set, records every command
        self._buffers = ThreadBuffers()  # one part-sized buffer per thread, reused by every write

    def count(self, size: int) -> int:
        """Parts of an entry of ``size`` bytes (an empty entry is one empty part)."""
        return max(1, -(-size // self.part_size))

    def send(self, connection: Any, key: str, source: ByteSource, names: list[str],
             tail: tuple[Any, ...] | None) -> tuple[float, float, Any]:
        """SET ``source``'s parts under ``names`` pipelined on ``connection``, then the ``tail`` command;
        returns host and device seconds and the tail's reply."""
        size, part = source.size, self.part_size
        buffer = self._buffers.get(min(size, part))
        host = device = 0.0
        sent: list[tuple[int, int, float]] = []  # (offset, bytes, sent at) per SET, for per-command latency
        for index, name in enumerate(names):
            t0 = time.perf_counter()
            offset = index * part
            view = buffer[: min(part, size - offset)]
            fill_pieces(source, offset, view, PIECE)
            command = connection.pack_command("SET", name, view, *self.expiry)
            t1 = time.perf_counter()
            connection.send_packed_command(command)
            sent.append((offset, len(view), t1))
            host += t1 - t0
            device += time.perf_counter() - t1
        t0 = time.perf_counter()
        if tail is not None:
            connection.send_command(*tail)
        log = self.context.io_log
        for offset, nbytes, at in sent:
            connection.read_response()
            if log is not None:  # a SET's latency: sent until its reply arrived
                log.record(key, "write", offset, nbytes, at, time.perf_counter())
        reply = connection.read_response() if tail is not None else None
        device += time.perf_counter() - t0
        return host, device, reply

    def receive(self, connection: Any, key: str, size: int, name: Callable[[int], str],
                sink: ByteSink) -> tuple[float, float]:
        """GET the entry's parts (part i under ``name(i)``) with a bounded read-ahead into ``sink``; host and
        device seconds."""
        part = self.part_size
        count = self.count(size)
        ahead = max(2, READ_AHEAD // part)
        host = device = 0.0
        log = self.context.io_log
        t0 = time.perf_counter()
        sent_at = [t0] * count  # when each GET went out, for per-command latency
        for index in range(min(ahead, count)):
            connection.send_command("GET", name(index))
        for index in range(count):
            data = connection.read_response()
            if index + ahead < count:
                sent_at[index + ahead] = time.perf_counter()
                connection.send_command("GET", name(index + ahead))
            t1 = time.perf_counter()
            device += t1 - t0
            offset = index * part
            self.check(key, index, data, min(part, size - offset))
            if log is not None:
                log.record(key, "read", offset, min(part, size - offset), sent_at[index], t1)
            consume_pieces(sink, offset, memoryview(data), PIECE)
            t0 = time.perf_counter()
            host += t0 - t1
        return host, device

    def receive_range(self, connection: Any, key: str, offset: int, out: memoryview,
                      name: Callable[[int], str]) -> None:
        """Copy the entry's bytes ``[offset, offset + len(out))`` into ``out``: one GETRANGE per part they
        overlap, pipelined."""
        part, end = self.part_size, offset + len(out)
        spans = [(index, max(offset, index * part) - index * part, min(end, (index + 1) * part) - index * part)
                 for index in range(offset // part, (end - 1) // part + 1)]
        log = self.context.io_log
        sent = time.perf_counter()
        for index, lo, hi in spans:
            connection.send_command("GETRANGE", name(index), lo, hi - 1)
        at = 0
        for index, lo, hi in spans:
            data = connection.read_response()
            self.check(key, index, data, hi - lo)
            if log is not None:  # pipelined: each GETRANGE's latency runs from the batch's send
                log.record(key, "read", index * part + lo, hi - lo, sent, time.perf_counter())
            out[at:at + len(data)] = data
            at += len(data)

    def check(self, key: str, index: int, data: bytes | None, expected: int) -> None:
        """A missing part is ``EntryGone`` when the tier's ``ttl`` explains it (the server expired it: a miss,
        as for any cache with a ttl), else a ``KeyError``; a part of another length an ``OSError``: never
        short data."""
        if data is None or (not data and expected):  # GET says None, GETRANGE says b"" for a missing key
            if self.expiry:
                raise EntryGone(f"tier {self.context.tier_name!r}: {key!r} (part {index}) expired on the server "
                                f"(ttl {self.expiry[1]} ms) before it was read")
            raise KeyError(f"no entry {key!r} (part {index}) in tier {self.context.tier_name!r}")
        if len(data) != expected:
            raise OSError(f"tier {self.context.tier_name!r}: part {index} of {key!r} holds {len(data)} bytes, "
                          f"expected {expected} (rewritten with another size or part_size?)")
