"""One request's new entries written in a row, the device's queue kept full across them (issue 32 §1).

Why: a stream that waits for each entry to be durable before it starts the next drains the device's queue
at every entry boundary: the device idles while the entry's last commands, its fsync and its close run.
A request that stores several entries (a prefix or RAG chunk it missed, then its prefill) is such a
stream.  ``WriteStream.put`` starts the next entry (``MultiTierCache.start_put``: the tier's
``write_pipelined``) and only then collects the previous one (``PendingPut.finish``), so one entry's end
overlaps the next entry's commands; at most one write is pending.

What stays true: an entry is in its tier (readable by any request, counted as stored, in the LRU) only
once its write has ended, durable; the write's latency is the tier's, from its first command to that end;
a failed pending write raises its ``StorageError`` (or ``Cancelled``) from the call that collects it, so
it fails the request as a failed write always did.  The request collects its last write before it ends
(``collect``), so its storage time includes every entry's durable end.

No wait while holding: the pending entry's lock stays held until it is collected, so the stream collects
it before it would block on any other entry's lock (``before_wait``; a read of the pending entry itself
is one).  Two streams each holding a pending entry the other wants cannot deadlock.

Not across requests: a request's storage work ends when its entries are durable, and its worker's next
request is another user's, taken by priority from the queue; a write still pending there would either
end the request before its entry is durable or delay its completion past the next request's first entry.
Nor demotions: a victim's copy is durable before it leaves its upper tier (``MultiTierCache._demote``).
"""

from __future__ import annotations

import contextlib

from kvbench_core.contracts.backend import DISCARD, ByteSink
from kvbench_core.engine.cache.waterfall import MultiTierCache, PendingPut


class WriteStream:
    """One request's cache work on one thread, with at most one new entry's write pending (module doc)."""

    __slots__ = ("cache", "pending")

    def __init__(self, cache: MultiTierCache) -> None:
        self.cache = cache
        self.pending: PendingPut | None = None

    def put(self, key: str, size: int) -> bool:
        """Start storing a new entry, then collect the previous one; False when no tier had room for it.
        The new entry's own outcome comes when it is collected (the next ``put``, a wait, or ``collect``)."""
        started = self.cache.start_put(key, size, self.collect)
        previous, self.pending = self.pending, started  # held first: a failed previous leaves it to abandon()
        if previous is not None:
            previous.finish()
        return started is not None

    def get(self, key: str, sink: ByteSink = DISCARD) -> str | None:
        """``MultiTierCache.get``, the pending write collected first if the read would wait for a lock."""
        return self.cache.get(key, sink, self.collect)

    def collect(self) -> None:
        """Wait for the pending write (if any) to end and put its entry in its tier; raises its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.finish()

    def abandon(self) -> None:
        """The request failed or was cancelled: end the pending write as ``collect`` does, its error already
        booked (``TierOperations``) and left for the request's own error to report."""
        with contextlib.suppress(Exception):  # booked by the collect; the request's first error is raised
            self.collect()
