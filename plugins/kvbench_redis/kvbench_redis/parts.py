"""The Redis tier's piece commands: what one operation (a write, a read) holds and sends on its connection.

The backend kit (``kvbench_core.contracts.pieces``) runs the loop: an entry's parts are its pieces, every
SET issued before the first reply is read (``writes_in_flight``), a read's GETs requested up to
``READ_AHEAD`` bytes ahead of the part being consumed (``reads_in_flight``), each command logged once from
its send to its reply.  A part is filled in pieces of at most ``PIECE`` bytes into the thread's reused
buffer and sent (``sendall`` returns once the kernel holds the bytes, so the buffer is free again for the
next part while the server stores this one): memory per operation is one part, whatever the entry size.
Not redis-py's ``Pipeline``, which keeps every command until ``execute`` and so the whole entry in memory.

L4 split: packing a SET is host time (``store_piece`` names it); socket sends and reply reads are device time
(network round trip plus server), which includes redis-py's reply parsing because redis-py cannot hand a
reply out without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbench_core.contracts.errors import EntryGone

#: Largest piece handed to ``source.fill`` / ``sink.consume``: parts may be far larger than the payload
#: generator's piece limit, so they are filled and consumed in pieces of this size (the tier's transfer_size).
PIECE = 16 << 20
#: Bytes of GET replies a read keeps requested ahead of the part it consumes (at least two parts).
READ_AHEAD = 64 << 20


@dataclass
class Operation:
    """The kit's handle for one operation on one entry: the pooled connection it holds and the names of
    the entry's parts (part i is ``name(i)``).  A write also carries the command sent after its parts (the
    stale parts' UNLINK, a shared store's commit)."""

    key: str
    size: int | None  # a range read does not know it
    pool: Any
    connection: Any
    name: Callable[[int], str]
    tail: tuple[Any, ...] | None = None
    writing: bool = True  # a write's replies are SETs'; a read's are the parts

    def release(self, broken: bool = False) -> None:
        """Give the connection back to its pool; after a failure (``broken``) dropped first: replies may
        still be in flight, and this socket must never go to the next user.  Safe to call twice."""
        if self.connection is None:
            return
        if broken:
            self.connection.disconnect()
        self.pool.release(self.connection)
        self.connection = None


def part_count(size: int, part_size: int) -> int:
    """Parts of an entry of ``size`` bytes (an empty entry is one empty part)."""
    return max(1, -(-size // part_size))


def check(data: bytes | None, expected: int, index: int, key: str, tier: str, expiry: tuple[Any, ...]) -> None:
    """A missing part is ``EntryGone`` when the tier's ``ttl`` explains it (the server expired it: a miss, as
    for any cache with a ttl), else a ``KeyError``; a part of another length an ``OSError``: never short
    data."""
    if data is None or (not data and expected):  # GET says None, GETRANGE says b"" for a missing key
        if expiry:
            raise EntryGone(f"tier {tier!r}: {key!r} (part {index}) expired on the server (ttl {expiry[1]} ms) "
                            "before it was read")
        raise KeyError(f"no entry {key!r} (part {index}) in tier {tier!r}")
    if len(data) != expected:
        raise OSError(f"tier {tier!r}: part {index} of {key!r} holds {len(data)} bytes, expected {expected} "
                      "(rewritten with another size or part_size?)")
