"""What every check writes and reads through: payloads bounded by the transfer size, sinks that verify every
byte and that the pieces tile the entry, and the ``IOTiming`` contract each operation's timing must meet."""

from __future__ import annotations

import threading

import numpy as np

from kvbench_core.contracts.backend import ByteSource, IOTiming, StorageBackend
from kvbench_core.contracts.conformance.harness import BackendHarness
from kvbench_core.contracts.payload import NoisePool, VerifySink

#: Slack allowed on ``host + device <= total``, relative to the total: the three come from separate clock
#: reads, so their sum may overshoot by a hair, never by a whole layer.  Relative, because an absolute
#: slack hides double counting wherever operations are short (100 us passed host time counted twice on
#: 64 KiB transfers, caught only at 1 MiB); ``TIMING_CLOCK_S`` covers the clock's own granularity.
TIMING_RELATIVE_SLACK = 0.01
TIMING_CLOCK_S = 2e-6


class _BoundedSource:
    """Wraps a payload and fails when the backend asks for a piece larger than its transfer size."""

    def __init__(self, inner: ByteSource, limit: int) -> None:
        self.inner, self.limit, self.size = inner, limit, inner.size

    def fill(self, offset: int, out: memoryview) -> None:
        if len(out) > self.limit:
            raise AssertionError(f"write asked for a {len(out)}-byte piece, over transfer_size {self.limit}")
        if offset < 0 or offset + len(out) > self.size:
            raise AssertionError(f"write asked for bytes [{offset}, {offset + len(out)}) of a {self.size}-byte entry")
        self.inner.fill(offset, out)


class _CoverageSink:
    """Verifies every piece against the payload and that the pieces tile ``[0, size)`` exactly once."""

    def __init__(self, pool: NoisePool, key: str, size: int, limit: int, scratch: np.ndarray) -> None:
        self._verify = VerifySink(pool, key, scratch)
        self._size, self._limit = size, limit
        self._pieces: list[tuple[int, int]] = []
        self._lock = threading.Lock()  # a backend may hand pieces over from its own I/O threads

    def consume(self, offset: int, data: memoryview) -> None:
        if len(data) > self._limit:
            raise AssertionError(f"read handed over a {len(data)}-byte piece, over transfer_size {self._limit}")
        with self._lock:
            self._pieces.append((offset, len(data)))
            self._verify.consume(offset, data)

    def check(self, key: str) -> None:
        if self._verify.mismatches:
            raise AssertionError(f"read of {key!r} ({self._size} B) returned wrong bytes "
                                 f"(first bad piece at offset {self._verify.first_bad_offset})")
        position = 0
        for offset, length in sorted(self._pieces):
            if offset != position:
                raise AssertionError(f"read of {key!r} ({self._size} B): pieces leave a gap or overlap at "
                                     f"offset {position} (next piece starts at {offset})")
            position += length
        if position != self._size:
            raise AssertionError(f"read of {key!r}: sink received {position} bytes, expected {self._size}")


def check_timing(timing: IOTiming, nbytes: int, what: str, op: str = "write") -> None:
    """The IOTiming contract: non-negative parts, ``host + device <= total``, bytes and commands right, and
    ``IOTiming.contract_error``'s rules (a store without a transfer issues no data command)."""
    if not isinstance(timing, IOTiming):
        raise AssertionError(f"{what} returned {type(timing).__name__}, not IOTiming")
    for part in ("total", "host", "device"):
        if getattr(timing, part) < 0:
            raise AssertionError(f"{what}: IOTiming.{part} is negative ({getattr(timing, part)})")
    if timing.host + timing.device > timing.total * (1 + TIMING_RELATIVE_SLACK) + TIMING_CLOCK_S:
        raise AssertionError(f"{what}: host {timing.host:.6f} s + device {timing.device:.6f} s "
                             f"exceeds total {timing.total:.6f} s by more than {TIMING_RELATIVE_SLACK:.0%} "
                             "(is a part counted twice?)")
    breach = timing.contract_error(op)
    if breach is not None:  # the engine refuses such a timing as a failed operation
        raise AssertionError(f"{what}: {breach}")
    if timing.nbytes + timing.dedup_bytes != nbytes:  # a shared tier's store may be (partly) deduplicated
        raise AssertionError(f"{what}: IOTiming.nbytes is {timing.nbytes} (dedup_bytes {timing.dedup_bytes}), "
                             f"expected {nbytes} in all")
    if timing.commands < 1 and timing.transferred:
        raise AssertionError(f"{what}: IOTiming.commands is {timing.commands}, expected >= 1")


def write_entry(harness: BackendHarness, backend: StorageBackend, key: str, size: int, seed_offset: int = 0) -> None:
    """Write the generated payload of ``key`` and check the returned timing."""
    payload = harness.pool(backend, seed_offset).payload(key, size)
    timing = backend.write(key, _BoundedSource(payload, backend.transfer_size))
    check_timing(timing, size, f"write of {key!r} ({size} B)")


def verify_entry(harness: BackendHarness, backend: StorageBackend, key: str, size: int, seed_offset: int = 0) -> None:
    """Read ``key`` back and fail unless the bytes are exactly the payload's."""
    sink = _CoverageSink(harness.pool(backend, seed_offset), key, size, backend.transfer_size,
                         harness.scratch(backend.transfer_size))
    timing = backend.read(key, size, sink)
    check_timing(timing, size, f"read of {key!r} ({size} B)", op="read")
    sink.check(key)
