"""Per-thread reusable byte buffers, and moving a buffer's bytes through a source or sink in pieces.

Network tiers (redis, s3) stage a whole part of an entry in host memory before
sending it, or after receiving it.  A fresh allocation per operation would
cost page faults on every call, so the benchmark would partly measure the
allocator; instead each thread keeps one buffer for the life of the backend,
grown on demand.  A part may be far larger than what a payload generator or a
sink handles in one call, so the part is filled and consumed in bounded pieces.
"""

from __future__ import annotations

import threading

from kvbench_core.contracts.backend import ByteSink, ByteSource


class ThreadBuffers:
    """One reusable buffer per thread, grown on demand and never shrunk.

    Threads never share a buffer, so no lock is needed and a buffer is free
    again as soon as its thread's operation no longer needs the bytes.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, size: int) -> memoryview:
        """A ``size``-byte view of this thread's buffer (its contents are whatever was left there)."""
        view: memoryview | None = getattr(self._local, "view", None)
        if view is None or len(view) < size:
            view = memoryview(bytearray(size))
            self._local.view = view
        return view[:size]


def fill_pieces(source: ByteSource, offset: int, view: memoryview, piece: int) -> None:
    """Fill ``view`` with the source's bytes from ``offset`` on, at most ``piece`` bytes per ``fill`` call."""
    for at in range(0, len(view), piece):
        source.fill(offset + at, view[at:at + piece])


def consume_pieces(sink: ByteSink, offset: int, view: memoryview, piece: int) -> None:
    """Hand ``view`` (the entry's bytes from ``offset`` on) to the sink, at most ``piece`` bytes per call."""
    for at in range(0, len(view), piece):
        sink.consume(offset + at, view[at:at + piece])
