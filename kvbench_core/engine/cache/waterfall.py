"""The multi-tier waterfall LRU cache (seed §3.4–3.5).

New entries go to the fastest enabled tier.  When a tier is above its target
usage, its least-recently-used entry cascades to the next tier, which first
makes room the same way (recursively); at the bottom tier LRU entries are
deleted.  By default data only flows down (the seed's one-way design);
``promotion: on_read`` moves a hit back to the top tier as production engines do.

Concurrency: one metadata lock guards usage, LRU order and the key index, and
is never held during I/O.  Space is *reserved* under that lock before any byte
is written, so no tier ever exceeds its capacity.  Each entry has its own
lock, held while it is read, written, demoted or deleted, so an entry is never
demoted twice; eviction only picks entries whose lock it can take at once,
which also rules out lock-order deadlocks.  A ``put`` publishes its new entry
(locked) in the index before touching storage, so two puts of one key (two
users missing the same shared prefix) run one after the other: the backend
never sees concurrent operations on a key, and the replaced entry's bytes are
released exactly once.

This module is the cache's bookkeeping (index, LRU order, reservations, moves).
The seed's placement rules are in ``engine/cache/placement.py``, the timing and booking
of each backend operation in ``engine/cache/tier_ops.py``, and the data it keeps
(policy, tier, entry) in ``engine/cache/cache_types.py``, where callers import them.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from kvbench_core.contracts.backend import DISCARD, ByteSink, ByteSource, IOTiming
from kvbench_core.contracts.errors import Cancelled, EntryGone, StorageError
from kvbench_core.engine.cache.cache_figures import cache_state_at_open
from kvbench_core.engine.cache.cache_types import Entry, EvictionPolicy, Tier, TierSource
from kvbench_core.engine.cache.placement import Placement, lock_lru_victim
from kvbench_core.engine.cache.tier_ops import StartedOp, TierOperations
from kvbench_core.engine.measure.cancel import CancelToken, cancellable_sink, cancellable_source
from kvbench_core.engine.measure.telemetry import Telemetry


def _nothing() -> None:
    """The default ``before_wait``: a caller with no pending put has nothing to collect before it waits."""


#: How long the end-of-run clear waits for an entry's lock: the drain is over, so a lock still held belongs
#: to a worker abandoned at the drain limit, which may hold it for as long as its stuck operation lasts.
CLEAR_WAIT_S = 1.0


class MultiTierCache:
    """Waterfall LRU over ``tiers``; payload bytes come from ``payload_for(key, size)``."""

    def __init__(
        self,
        tiers: list[Tier],
        telemetry: Telemetry,
        payload_for: Callable[[str, int], ByteSource],
        *,
        policy: EvictionPolicy | None = None,
        promotion: str = "none",
        clock: Callable[[], float] = time.monotonic,
        cancel: CancelToken | None = None,
        entry_lock: Callable[[], Any] = threading.Lock,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        if not tiers:
            raise ValueError("a cache needs at least one enabled tier")
        self.tiers = tiers
        self.telemetry = telemetry
        self.payload_for = payload_for
        self.policy = policy or EvictionPolicy()
        self.promotion = promotion
        self.clock = clock
        self.cancel = cancel  # set when the drain limit runs out: I/O stops at the next command boundary
        # Each entry's lock, and the wait for a busy LRU entry: kvbench forecast runs requests as greenlets on
        # a simulated clock and gives its own of both (kvbench_core/forecast/steps.py).
        self.entry_lock = entry_lock
        self.pause = pause
        self.placement = Placement(tiers, self.policy)
        self._ops = TierOperations(telemetry)  # times and books every backend operation
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}

    # -- public API ----------------------------------------------------------------------------------
    def contains(self, key: str) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and entry.tier is not None

    def put(self, key: str, size: int) -> str | None:
        """Store a new entry (replacing any old one); returns the tier it landed in, or None."""
        started = self.start_put(key, size)
        return None if started is None else started.finish()

    def start_put(self, key: str, size: int, before_wait: Callable[[], None] = _nothing) -> PendingPut | None:
        """Begin storing a new entry (replacing any old one): returns once its tier's ``write_pipelined`` has
        (a pipelining tier: the entry's commands issued, its fsync still running), or None when no tier had
        room.  Until ``PendingPut.finish`` the entry is in no tier: not readable, not counted as stored, and
        its lock is held, so a request that reads or replaces it waits.  ``before_wait`` runs before this
        call blocks on another entry's lock: the caller collects its own pending put there, so no one waits
        for a lock while holding one (``write_stream``)."""
        entry = Entry(key=key, size=size, last_access=self.clock(), lock=self.entry_lock())
        entry.lock.acquire()
        try:
            with self._lock:
                old = self._entries.get(key)
                self._entries[key] = entry  # readers and later puts of this key now wait for this one
            if old is not None:
                self._lock_entry(old, before_wait)
                try:
                    self._remove(old)
                finally:
                    old.lock.release()
            for tier in self.placement.order(size):
                if self._make_room(self.tiers.index(tier), size, depth=0):
                    return PendingPut(self, entry, tier, self._start_write_new(tier, entry))
            self.telemetry.count("allocation_failed")
        except BaseException:
            self._forget_new(entry)
            raise
        self._forget_new(entry)
        return None

    def _land(self, entry: Entry, tier: Tier, started: StartedOp) -> str:
        """``PendingPut.finish``: wait for the entry's write to end (durable), then it is in ``tier``: in its
        LRU, readable, counted as stored; its lock is released whatever happened."""
        try:
            self._ops.collect(started)
        except BaseException:  # booked by the collect: the space it held is free again
            with self._lock:
                tier.usage -= entry.size
            self._forget_new(entry)
            raise
        with self._lock:
            entry.tier = tier
            tier.lru[entry.key] = entry
        self.telemetry.count("stored_entry_bytes", entry.size)  # the working set the declaration reports
        self.telemetry.count("stored_entries")
        entry.lock.release()
        return tier.name

    def _forget_new(self, entry: Entry) -> None:
        """A new entry that did not land (no room, its write failed or cancelled): out of the index, unlocked."""
        with self._lock:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
        entry.lock.release()

    @staticmethod
    def _lock_entry(entry: Entry, before_wait: Callable[[], None]) -> None:
        """Take ``entry``'s lock; if another holds it, run ``before_wait`` first, then wait."""
        if not entry.lock.acquire(blocking=False):
            before_wait()
            entry.lock.acquire()

    def get(self, key: str, sink: ByteSink = DISCARD, before_wait: Callable[[], None] = _nothing) -> str | None:
        """Read an entry from wherever it lives; returns that tier's name, or None on a miss.  ``before_wait``
        as ``start_put``'s: run before waiting for the entry's lock."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            entry = self._adopt_shared(key)
        if entry is None:
            self.telemetry.record_read_outcome(None)
            return None
        self._lock_entry(entry, before_wait)
        try:
            return self._read_locked(entry, sink)
        finally:
            entry.lock.release()

    def _read_locked(self, entry: Entry, sink: ByteSink) -> str | None:
        """``get``'s read of ``entry``, its lock held."""
        key, tier = entry.key, entry.tier
        if tier is None:  # deleted (or its write failed) while we waited for its lock
            self.telemetry.record_read_outcome(None)
            return None
        sink = cancellable_sink(sink, self.cancel)
        try:
            self._ops.timed(tier, "read", key, lambda: tier.backend.read(key, entry.size, sink))
        except EntryGone:  # the tier's own rule (a ttl) dropped it: a miss, and the entry is forgotten
            self._expired(entry)
            self.telemetry.record_read_outcome(None)
            return None
        entry.last_access = self.clock()
        with self._lock:
            if tier.lru.get(key) is entry:
                tier.lru.move_to_end(key)
        self.telemetry.record_read_outcome(tier.name)
        if self.promotion == "on_read" and tier is not self.tiers[0] and not entry.foreign:
            self._promote(entry)
        return tier.name

    def _adopt_shared(self, key: str) -> Entry | None:
        """A local miss may be a hit in a shared tier (another client's system prompt, seed §11.5)."""
        for tier in self.tiers:
            size = tier.backend.lookup(key)
            if size:
                entry = Entry(key=key, size=size, tier=tier, last_access=self.clock(), foreign=True,
                              lock=self.entry_lock())
                with self._lock:
                    entry = self._entries.setdefault(key, entry)
                if entry.foreign:
                    self.telemetry.count("shared_tier_hits")
                return entry
        return None

    def delete(self, key: str) -> None:
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return
        with entry.lock:
            self._remove(entry)

    def occupancy(self) -> dict[str, dict[str, int | None]]:
        """Per tier: entries, bytes held and ``capacity_bytes`` (None when unbounded), the result's one name."""
        with self._lock:
            return {t.name: {"entries": len(t.lru), "bytes": t.usage,
                             "capacity_bytes": None if math.isinf(t.capacity) else int(t.capacity)}
                    for t in self.tiers}

    def cache_state(self) -> str:
        """``cold`` / ``warm`` / ``steady`` now (``engine/cache/cache_figures.py``), read under the metadata lock."""
        with self._lock:
            return cache_state_at_open(self.tiers, self.policy.target_usage_ratio)

    def entry_size(self, key: str) -> int | None:
        """Bytes of the entry stored under ``key``, or None when it is not cached."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.size if entry else None

    def location(self, key: str) -> str | None:
        with self._lock:
            entry = self._entries.get(key)
            return entry.tier.name if entry and entry.tier else None

    def demote_cold(self, stop: Callable[[], bool] | None = None) -> int:
        """Move entries idle longer than the lower tier's ``cold_after`` down one tier.

        The runner calls this from its cold mover's thread (``engine/run/cold_mover.py``), never from its
        loop: one demotion may take seconds (a multi-GiB upload to S3).  Once ``stop()`` is true no new
        demotion starts (the window closed); the rest wait for the next call, or the run's end."""
        moved = 0
        now = self.clock()
        for index, lower in enumerate(self.tiers[1:], start=1):
            if lower.cold_after is None:
                continue
            upper = self.tiers[index - 1]
            with self._lock:
                cold = [e for e in upper.lru.values() if now - e.last_access >= lower.cold_after]
            for entry in cold:
                if stop is not None and stop():
                    break
                if not entry.lock.acquire(blocking=False):
                    continue
                try:
                    target = self.placement.demotion_target(index - 1, entry.size)
                    if entry.tier is upper and target is not None and self._make_room(target, entry.size, depth=1):
                        self._demote(entry, upper, self.tiers[target])
                        upper.evicted_bytes += entry.size  # it left the tier: turnover (cache_state)
                        moved += 1
                finally:
                    entry.lock.release()
        if moved:
            self.telemetry.count("cold_demotions", moved)
        return moved

    def clear(self) -> None:
        """Delete every entry (end of run); errors are left to the backends' own cleanup.  An entry whose
        lock a worker abandoned at the drain limit still holds (its operation stuck on a server that stopped
        answering) is left to them too: waiting for it held the run for the operation's whole timeout."""
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            if not entry.lock.acquire(timeout=CLEAR_WAIT_S):
                continue
            try:
                with contextlib.suppress(StorageError):
                    self._remove(entry)
            finally:
                entry.lock.release()

    # -- eviction: making room ---------------------------------------------------------------------------
    def _make_room(self, index: int, size: int, depth: int) -> bool:
        """Reserve ``size`` bytes in tier ``index``, cascading LRU entries down as needed."""
        if depth > self.policy.max_recursion_depth:
            self.telemetry.count("recursion_limit_hit")
            return False
        tier = self.tiers[index]
        evictions = 0
        busy_waits = 0
        while True:
            with self._lock:
                if self.placement.fits(tier, size):
                    tier.usage += size
                    tier.largest_entry = max(tier.largest_entry, size)
                    return True
                victim = lock_lru_victim(tier)
                if victim is None:
                    busy = bool(tier.lru)
            if victim is None:
                # Every LRU entry is busy (being read or moved): wait briefly for one to free up.
                if busy and busy_waits < 200:
                    busy_waits += 1
                    self.pause(0.001)
                    continue
                return False
            try:
                evictions += 1
                if evictions > self.policy.max_evictions:
                    self.telemetry.count("eviction_cap_hit")
                    self._return_victim(tier, victim)
                    return False
                # Below, the victim skips tiers it is too large for, as a new entry would.
                target = self.placement.demotion_target(index, victim.size)
                tier.evicted_bytes += victim.size  # undone below if the cascade is refused
                if target is None:
                    self._remove(victim)
                    self.telemetry.record_eviction_delete()
                elif self._make_room(target, victim.size, depth + 1):
                    self._demote(victim, tier, self.tiers[target])
                elif self.policy.no_room_below == "drop":
                    # The tier below cannot take it: the entry is dropped rather than stall the cache.
                    self._remove(victim)
                    self.telemetry.count("evicted_without_room_below")
                else:
                    # The seed refuses the cascade: the victim stays (still least recently used), no room here.
                    tier.evicted_bytes -= victim.size
                    self._return_victim(tier, victim)
                    self.telemetry.count("cascade_refused")
                    return False
            finally:
                victim.lock.release()

    def _return_victim(self, tier: Tier, victim: Entry) -> None:
        with self._lock:
            tier.lru[victim.key] = victim
            tier.lru.move_to_end(victim.key, last=False)  # still the least recently used

    # -- I/O helpers (entry lock held, metadata lock not held) ----------------------------------------
    def _start_write_new(self, tier: Tier, entry: Entry) -> StartedOp:
        """Start the new entry's write to ``tier`` (space reserved there), pipelined where the tier can."""
        source = cancellable_source(self.payload_for(entry.key, entry.size), self.cancel)
        try:
            return self._ops.start(tier, "write", entry.key,
                                   lambda: tier.backend.write_pipelined(entry.key, source))
        except BaseException:
            with self._lock:
                tier.usage -= entry.size
            raise

    def _demote(self, entry: Entry, upper: Tier, lower: Tier) -> None:
        """Copy ``entry`` from ``upper`` to ``lower`` (space already reserved there), then free upper."""
        source = TierSource(upper.backend, entry.key, entry.size)
        cancellable = cancellable_source(source, self.cancel)
        # GPU tier -> GPUDirect tier: the entry's device tensor goes straight to storage, no host bounce.
        tensor_path = upper.backend.holds_device_tensors and lower.backend.writes_device_tensors
        try:
            def write() -> IOTiming:
                if tensor_path:
                    source.bytes_read = entry.size  # the DMA reads the whole device tensor
                    return lower.backend.write_tensor(entry.key, upper.backend.tensor(entry.key))
                return lower.backend.write(entry.key, cancellable)

            self._ops.copy(upper, lower, entry, source, write)
        except EntryGone:  # the upper tier's own rule dropped it while it was copied: nothing left to move
            with self._lock:
                lower.usage -= entry.size
            self._expired(entry)
            return
        except (StorageError, Cancelled):
            with self._lock:
                lower.usage -= entry.size
                upper.lru[entry.key] = entry
                upper.lru.move_to_end(entry.key, last=False)
            raise
        self._ops.delete_from(upper, entry)
        with self._lock:
            if upper.lru.get(entry.key) is entry:  # a cold demotion takes it from the middle of the LRU
                del upper.lru[entry.key]
            upper.usage -= entry.size
            entry.tier = lower
            lower.lru[entry.key] = entry
        self.telemetry.record_demotion(upper.name, lower.name, entry.size)

    def _promote(self, entry: Entry) -> None:
        top = self.tiers[0]
        lower = entry.tier
        assert lower is not None
        if not self.placement.admits(top, entry.size) or not self._make_room(0, entry.size, depth=0):
            return
        source = TierSource(lower.backend, entry.key, entry.size)
        cancellable = cancellable_source(source, self.cancel)
        try:
            self._ops.copy(lower, top, entry, source, lambda: top.backend.write(entry.key, cancellable))
        except EntryGone:  # expired in the tier below since it was read: not promoted, and forgotten
            with self._lock:
                top.usage -= entry.size
            self._expired(entry)
            return
        except (StorageError, Cancelled):
            with self._lock:
                top.usage -= entry.size
            raise
        with self._lock:
            lower.lru.pop(entry.key, None)
        self._ops.delete_from(lower, entry)
        with self._lock:
            lower.usage -= entry.size
            entry.tier = top
            top.lru[entry.key] = entry
        self.telemetry.record_promotion()
        self.telemetry.count("promoted_bytes", entry.size)  # the written_bytes check's promotion copies

    def _expired(self, entry: Entry) -> None:
        """Its tier dropped the entry by a rule of its own (``EntryGone``: a ttl): forget it, count it."""
        self._remove(entry)
        self.telemetry.count("expired_reads")

    def _remove(self, entry: Entry) -> None:
        """Delete the entry from its tier and the index (entry lock held)."""
        tier = entry.tier
        if tier is None:
            return
        if entry.foreign:  # another client's entry: forget it here, leave it in the shared tier
            with self._lock:
                entry.tier = None
                if self._entries.get(entry.key) is entry:
                    del self._entries[entry.key]
            return
        self._ops.delete_from(tier, entry)
        with self._lock:
            if tier.lru.get(entry.key) is entry:
                del tier.lru[entry.key]
            tier.usage -= entry.size
            entry.tier = None
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    def describe(self) -> dict[str, Any]:
        return {"promotion": self.promotion, "policy": self.policy.__dict__,
                "tiers": [{"name": t.name, "capacity": None if math.isinf(t.capacity) else t.capacity,
                           "cold_after": t.cold_after} for t in self.tiers]}


class PendingPut:
    """A new entry whose write ``MultiTierCache.start_put`` began: ``finish`` waits for it to be durable and
    puts it in its tier, or raises the write's error; called once, on the thread that started it."""

    __slots__ = ("cache", "entry", "started", "tier")

    def __init__(self, cache: MultiTierCache, entry: Entry, tier: Tier, started: StartedOp) -> None:
        self.cache, self.entry, self.tier, self.started = cache, entry, tier, started

    @property
    def key(self) -> str:
        return self.entry.key

    def finish(self) -> str:
        """The tier the entry landed in, once its write has ended; raises its ``StorageError``/``Cancelled``."""
        return self.cache._land(self.entry, self.tier, self.started)
