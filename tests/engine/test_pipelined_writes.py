"""A request's entries are written in a row with one write pending (issue 32 §1): the next entry starts before
the previous one's end is collected, and no entry is in its tier (readable, stored) before its write ended.

The tier here is DRAM whose pipelined writes end only when the test opens their gate (``GatedTier``): the
order of events is set by the test, not by timing.  The nvme tier's own run is in
plugins/kvbench_nvme/tests/test_nvme_pipelined_run.py.
"""

from __future__ import annotations

import errno
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from testkit import eventually

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming
from kvbench_core.contracts.errors import Cancelled, StorageError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.workload import DEFAULT_QOS, Phase, Read, Request, Write
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.cache.write_stream import WriteStream
from kvbench_core.engine.measure.cancel import CancelToken
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.engine.run.executor import RequestExecutor

BPT = 1024  # bytes per token


class GatedTier(CPUMemoryBackend):
    """DRAM whose ``write_pipelined`` stores the bytes at the call and ends (``result``) only once
    ``gates[key]`` is open, raising EIO for a key in ``fail``; ``events`` is what happened, in order."""

    name = "gated"

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.events: list[tuple[str, str]] = []
        self.gates: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.fail: set[str] = set()
        self.after_start: Callable[[str], None] = lambda key: None

    def write_pipelined(self, key: str, source: ByteSource) -> GatedWrite:
        timing = self.write(key, source)
        self.events.append(("started", key))
        self.after_start(key)
        return GatedWrite(self, key, timing)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        self.events.append(("read", key))
        return super().read(key, size, sink)


class GatedWrite:
    def __init__(self, tier: GatedTier, key: str, timing: IOTiming) -> None:
        self.tier, self.key, self.timing = tier, key, timing

    def result(self) -> IOTiming:
        self.tier.events.append(("collecting", self.key))
        assert self.tier.gates[self.key].wait(10), "the test never opened the gate"
        if self.key in self.tier.fail:
            self.tier.delete(self.key)
            raise OSError(errno.EIO, "injected failure at the entry's end")
        self.tier.events.append(("durable", self.key))
        return self.timing


def gated(*, open_gates: bool = True, cancel: CancelToken | None = None
          ) -> tuple[GatedTier, MultiTierCache, RequestExecutor]:
    telemetry = Telemetry(list(DEFAULT_QOS))
    telemetry.start_measuring()
    tier = GatedTier({}, BackendContext(tier_name="dram", run_id="test"))
    if open_gates:
        tier.gates = defaultdict(_opened)
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=4 << 20)
    cache = MultiTierCache([Tier("dram", tier, 64 << 20)], telemetry, pool.payload, cancel=cancel)
    return tier, cache, RequestExecutor(cache, telemetry, BPT, decode_batch=32)


def _opened() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


def prefix_then_prefill(phase: Phase = Phase.PREFILL) -> Request:
    """A request that misses its prefix (and so stores it) and then stores its prefill: two entries."""
    return Request(0, 1, "batch", context_tokens=20, generate_tokens=1,
                   reads=(Read("p", 10, "prefix", on_miss=Write("p", 10, "prefix")),),
                   write=Write("k", 10), phase=phase)


def test_the_next_entry_starts_before_the_previous_one_is_collected() -> None:
    tier, cache, executor = gated()
    executor.execute(prefix_then_prefill())
    assert tier.events == [("started", "p"), ("started", "k"), ("collecting", "p"), ("durable", "p"),
                           ("collecting", "k"), ("durable", "k")]  # k's end too, before the request ended
    assert cache.location("p") == cache.location("k") == "dram"
    assert executor.telemetry.tiers["dram"]["write"].ops == 2


def test_an_entry_is_in_no_tier_and_not_readable_before_its_write_ended() -> None:
    tier, cache, executor = gated(open_gates=False)
    tier.gates["k"].set()
    request = threading.Thread(target=executor.execute, args=(prefix_then_prefill(),))
    request.start()
    assert eventually(lambda: ("collecting", "p") in tier.events)  # k started, p's end still held
    assert cache.location("p") is None and not cache.contains("p")
    found: list[str | None] = []
    reader = threading.Thread(target=lambda: found.append(cache.get("p")))  # another request's read
    reader.start()
    reader.join(0.3)
    assert reader.is_alive() and ("read", "p") not in tier.events  # it waits for p's end
    tier.gates["p"].set()
    reader.join(10)
    request.join(10)
    assert found == ["dram"]
    assert tier.events.index(("durable", "p")) < tier.events.index(("read", "p"))


def test_a_read_of_the_pending_entry_by_its_own_request_collects_it_first() -> None:
    tier, _, executor = gated()
    executor.execute(Request(0, 1, "batch", context_tokens=10, generate_tokens=1, write=Write("k", 10),
                             phase=Phase.PREFILL_DECODE))  # the decode reads the entry just written
    assert tier.events == [("started", "k"), ("collecting", "k"), ("durable", "k"), ("read", "k")]


def test_a_failed_pending_write_fails_its_request_and_stores_nothing() -> None:
    tier, cache, executor = gated()
    tier.fail.add("p")
    with pytest.raises(StorageError, match="write of 'p' failed: injected failure"):
        executor.execute(prefix_then_prefill())
    assert cache.location("p") is None
    assert cache.location("k") == "dram"  # started before p's end failed, durable, so stored: not lost
    stats = executor.telemetry.tiers["dram"]["write"]
    assert (stats.errors, stats.ops) == (1, 1)
    assert cache.tiers[0].usage == 10 * BPT  # p's reservation is free again
    assert run_within(lambda: cache.get("k")) == "dram"  # no lock left held


def test_a_cancelled_next_entry_still_collects_the_pending_one() -> None:
    token = CancelToken()
    tier, cache, executor = gated(cancel=token)
    tier.after_start = lambda key: token.cancel()  # the drain limit runs out once p's commands are issued
    with pytest.raises(Cancelled):
        executor.execute(prefix_then_prefill())
    assert ("durable", "p") in tier.events and cache.location("p") == "dram"
    assert cache.location("k") is None and cache.tiers[0].usage == 10 * BPT


def test_two_streams_waiting_for_each_other_s_pending_entries_do_not_deadlock() -> None:
    """Each stream holds a pending entry the other then reads: before it waits for a lock, a stream
    collects its own pending write, so neither holds a lock while it waits."""
    _, cache, _ = gated()
    both_pending = threading.Barrier(2, timeout=10)
    found: dict[str, str | None] = {}

    def stream(mine: str, theirs: str) -> None:
        writes = WriteStream(cache)
        writes.put(mine, BPT)
        both_pending.wait()
        found[theirs] = writes.get(theirs)
        writes.collect()

    threads = [threading.Thread(target=stream, args=keys) for keys in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "the two streams deadlocked"
    assert found == {"a": "dram", "b": "dram"}



def run_within(action: Callable[[], Any], limit_s: float = 10.0) -> Any:
    """``action()`` on another thread; fails the test if it has not returned within ``limit_s``."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(action()))
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), "it waited for a lock nobody releases"
    return out[0]
