"""The conformance checks themselves, runnable with or without pytest (``kvbench plugins --check``)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvbench_core.contracts.backend import DISCARD, BackendContext, ByteSource, IOTiming, StorageBackend
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.engine.payload import NoisePool, VerifySink

#: Slack allowed on ``host + device <= total``, relative to the total: the three come from separate clock
#: reads, so their sum may overshoot by a hair, never by a whole layer.  Relative, because an absolute
#: slack hides double counting wherever operations are short (100 us passed host time counted twice on
#: 64 KiB transfers, caught only at 1 MiB); ``TIMING_CLOCK_S`` covers the clock's own granularity.
TIMING_RELATIVE_SLACK = 0.01
TIMING_CLOCK_S = 2e-6
_POOL_BYTES = 1 << 20  # small pool: start-up stays fast, the stamps still make every block unique


class CheckSkipped(Exception):
    """A check that cannot run for this backend (no probe given); the reason says what to provide."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check, as ``kvbench plugins check`` prints it."""

    name: str
    status: str  # "pass", "fail" or "skip"
    detail: str = ""


@dataclass
class BackendHarness:
    """How the checks obtain backends: everything backend-specific the suite needs, as callables.

    ``factory`` builds an *unopened* backend for a context (the checks open and
    close it).  ``remaining_entries`` and ``dead_factory`` enable the
    ``cleanup`` and ``dead_endpoint`` checks.  ``quick`` trims sizes and thread
    counts for the command line, where the tier may be a real remote service.
    """

    factory: Callable[[BackendContext], StorageBackend]
    remaining_entries: Callable[[StorageBackend], Iterable[str]] | None = None
    dead_factory: Callable[[BackendContext], StorageBackend] | None = None
    sizes: Callable[[int], list[int]] | None = None
    quick: bool = False
    seed: int = 20240611
    threads: int = 4
    _pools: dict[tuple[int, int], NoisePool] = field(default_factory=dict, repr=False)
    _scratch: threading.local = field(default_factory=threading.local, repr=False)

    def context(self) -> BackendContext:
        """A fresh context with a unique run id, so parallel checks never share keys."""
        return BackendContext(
            tier_name="conformance",
            run_id=f"kvbconf-{uuid.uuid4().hex[:10]}",
            seed=self.seed,
            concurrency=self.threads,
        )

    @contextmanager
    def opened(self) -> Iterator[StorageBackend]:
        """An opened backend that is closed (cleaned up) however the check ends."""
        backend = self.factory(self.context())
        backend.open()
        try:
            yield backend
        finally:
            backend.close()

    def pool(self, backend: StorageBackend, seed_offset: int = 0) -> NoisePool:
        """A noise pool whose pieces fit the backend's transfer size (cached: generation costs)."""
        key = (backend.transfer_size, seed_offset)
        if key not in self._pools:
            self._pools[key] = NoisePool(self.seed + seed_offset, pool_bytes=_POOL_BYTES,
                                         max_piece=backend.transfer_size)
        return self._pools[key]

    def scratch(self, nbytes: int) -> np.ndarray:
        """A per-thread verification buffer, reused: fresh large allocations cost page faults."""
        buffer = getattr(self._scratch, "buffer", None)
        if buffer is None or buffer.shape[0] < nbytes:
            buffer = self._scratch.buffer = np.empty(nbytes, dtype=np.uint8)
        return buffer

    def entry_sizes(self, transfer_size: int) -> list[int]:
        """Round-trip sizes: tiny, around 512 B/4 KiB blocks, around one and two transfer sizes."""
        if self.sizes is not None:
            return self.sizes(transfer_size)
        if self.quick:
            return sorted({1, 4096 + 3, transfer_size + 1})
        return sorted({1, 7, 512, 4096 + 3, transfer_size, transfer_size + 1, 2 * transfer_size + 4099})


# --- probes the checks share ------------------------------------------------------------------


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


def check_timing(timing: IOTiming, nbytes: int, what: str) -> None:
    """The IOTiming contract: non-negative parts, ``host + device <= total``, bytes and commands right."""
    if not isinstance(timing, IOTiming):
        raise AssertionError(f"{what} returned {type(timing).__name__}, not IOTiming")
    for part in ("total", "host", "device"):
        if getattr(timing, part) < 0:
            raise AssertionError(f"{what}: IOTiming.{part} is negative ({getattr(timing, part)})")
    if timing.host + timing.device > timing.total * (1 + TIMING_RELATIVE_SLACK) + TIMING_CLOCK_S:
        raise AssertionError(f"{what}: host {timing.host:.6f} s + device {timing.device:.6f} s "
                             f"exceeds total {timing.total:.6f} s by more than {TIMING_RELATIVE_SLACK:.0%} "
                             "(is a part counted twice?)")
    if timing.nbytes != nbytes:
        raise AssertionError(f"{what}: IOTiming.nbytes is {timing.nbytes}, expected {nbytes}")
    if timing.commands < 1:
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
    check_timing(timing, size, f"read of {key!r} ({size} B)")
    sink.check(key)


def remaining_files(root: str | os.PathLike[str]) -> list[str]:
    """Every file under ``root`` (relative paths): the ``remaining_entries`` probe of directory tiers."""
    base = Path(root)
    if not base.exists():
        return []
    return sorted(str(path.relative_to(base)) for path in base.rglob("*") if path.is_file())


# --- the checks -------------------------------------------------------------------------------


def check_round_trip(harness: BackendHarness) -> str:
    """Every size from 1 byte to two transfer sizes with an unaligned tail comes back byte-exact."""
    with harness.opened() as backend:
        sizes = harness.entry_sizes(backend.transfer_size)
        for index, size in enumerate(sizes):
            key = f"rt{index}-{size}"
            write_entry(harness, backend, key, size)
            verify_entry(harness, backend, key, size)
    return f"sizes {sizes}"


def check_overwrite(harness: BackendHarness) -> str:
    """Writing an existing key replaces its bytes, growing and shrinking (no stale tail, no old data)."""
    with harness.opened() as backend:
        big, small = backend.transfer_size + 4099, 1000
        for key, first, second in (("ow-shrink", big, small), ("ow-grow", small, big)):
            write_entry(harness, backend, key, first, seed_offset=0)
            write_entry(harness, backend, key, second, seed_offset=1)  # different bytes for the same key
            verify_entry(harness, backend, key, second, seed_offset=1)
    return "shrink and grow"


def check_delete(harness: BackendHarness) -> str:
    """A deleted entry is gone; deleting it again or deleting a never-written key is not an error."""
    with harness.opened() as backend:
        write_entry(harness, backend, "del-1", 4096 + 5)
        backend.delete("del-1")
        try:
            backend.read("del-1", 4096 + 5, DISCARD)
        except Exception:
            pass
        else:
            raise AssertionError("read of a deleted entry did not raise")
        backend.delete("del-1")
        backend.delete("never-written")
    return "deleted, then deleted again"


def check_read_range(harness: BackendHarness) -> str:
    """``read_range`` returns exactly the requested slice, across piece boundaries and at the tail."""
    with harness.opened() as backend:
        size = backend.transfer_size + 4099
        write_entry(harness, backend, "rr", size)
        # The truth is the entry as written: rendered from offset 0 in transfer-size pieces.
        expected = np.empty(size, dtype=np.uint8)
        payload = harness.pool(backend).payload("rr", size)
        for start in range(0, size, backend.transfer_size):
            payload.fill(start, memoryview(expected[start:start + backend.transfer_size]))
        ranges = [(0, 1), (1, 511), (511, 1026), (backend.transfer_size - 3, 4102), (size - 10, 10), (0, size)]
        for offset, length in ranges:
            got = np.zeros(length, dtype=np.uint8)
            backend.read_range("rr", offset, memoryview(got))
            if not np.array_equal(got, expected[offset:offset + length]):
                raise AssertionError(f"read_range(offset={offset}, length={length}) returned wrong bytes")
    return f"{len(ranges)} ranges"


def check_capacity(harness: BackendHarness) -> str:
    """``capacity_bytes()`` is None (unknown) or a positive int, as ``capacity: auto`` needs."""
    with harness.opened() as backend:
        capacity = backend.capacity_bytes()
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0):
        raise AssertionError(f"capacity_bytes() returned {capacity!r}; expected None or a positive int")
    return "unknown" if capacity is None else f"{capacity} B"


def check_timing_contract(harness: BackendHarness) -> str:
    """IOTiming of a multi-piece write and read: non-negative, host + device <= total, nbytes, commands."""
    with harness.opened() as backend:
        size = backend.transfer_size + 1
        write_entry(harness, backend, "timing", size)  # both helpers apply check_timing
        verify_entry(harness, backend, "timing", size)
    return f"{size} B"


def check_concurrency(harness: BackendHarness) -> str:
    """Threads writing and reading distinct keys at once never see each other's bytes or errors."""
    threads, keys_per_thread = (2, 2) if harness.quick else (harness.threads, 3)
    errors: list[BaseException] = []
    with harness.opened() as backend:
        size = min(backend.transfer_size, 1 << 20) + 13
        harness.pool(backend)  # generate before the threads start, not inside the race
        barrier = threading.Barrier(threads)

        def worker(index: int) -> None:
            try:
                barrier.wait()
                keys = [f"cc{index}-{n}" for n in range(keys_per_thread)]
                for n, key in enumerate(keys):
                    write_entry(harness, backend, key, size + n)
                for n, key in enumerate(keys):
                    verify_entry(harness, backend, key, size + n)
                    backend.delete(key)
            except BaseException as error:
                errors.append(error)

        pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    if errors:
        raise AssertionError(f"{len(errors)} of {threads} threads failed; first: {errors[0]!r}") from errors[0]
    return f"{threads} threads x {keys_per_thread} keys"


#: The entries ``check_cleanup`` writes (the first is deleted again before ``close()``).
CLEANUP_KEYS = ("cl0", "cl1", "cl2")


def check_cleanup(harness: BackendHarness) -> str:
    """``close()`` removes every entry the run created (``keep`` is false)."""
    if harness.remaining_entries is None:
        raise CheckSkipped("no remaining_entries() probe given for this backend")
    backend = harness.factory(harness.context())
    backend.open()
    try:
        for index, key in enumerate(CLEANUP_KEYS):
            write_entry(harness, backend, key, 4096 * (index + 1) + 1)
        backend.delete(CLEANUP_KEYS[0])
    finally:
        backend.close()
    left = list(harness.remaining_entries(backend))
    if left:
        raise AssertionError(f"close() left {len(left)} entries behind: {left[:5]}")
    return "nothing left"


def reopen_probe(factory: Callable[[BackendContext], StorageBackend]) -> Callable[[StorageBackend], list[str]]:
    """A ``remaining_entries`` probe for any backend, for when its own listing is not at hand (the command
    line): open a second backend on the closed one's context (same run id, so the same directory, prefix
    or namespace) and try to read one byte of each entry ``check_cleanup`` wrote.  An entry that still
    reads was left behind; one that raises is gone.  The probe's own ``close()`` then removes leftovers."""

    def remaining(closed: StorageBackend) -> list[str]:
        probe = factory(closed.context)
        probe.open()
        try:
            left = []
            for key in CLEANUP_KEYS:
                try:
                    probe.read_range(key, 0, memoryview(bytearray(1)))
                except Exception:  # any failure to read means the entry is not there
                    continue
                left.append(key)
            return left
        finally:
            probe.close()

    return remaining


def check_describe(harness: BackendHarness) -> str:
    """``describe()`` is a JSON-serialisable dict naming the backend (it goes into the result)."""
    with harness.opened() as backend:
        info = backend.describe()
    if not isinstance(info, dict) or "backend" not in info:
        raise AssertionError(f"describe() must return a dict with a 'backend' key, got {info!r}")
    try:
        json.dumps(info)
    except (TypeError, ValueError) as error:
        raise AssertionError(f"describe() is not JSON-serialisable: {error}") from None
    return f"backend={info['backend']}"


def check_dead_endpoint(harness: BackendHarness) -> str:
    """A backend pointed at a dead endpoint fails in ``open()`` with ``BackendUnavailable``."""
    if harness.dead_factory is None:
        raise CheckSkipped("no dead-endpoint backend given for this backend")
    backend = harness.dead_factory(harness.context())
    try:
        backend.open()
    except BackendUnavailable as error:
        return str(error)
    except Exception as error:
        raise AssertionError(f"open() on a dead endpoint raised {type(error).__name__}: {error}; "
                             "expected kvbench_core.contracts.errors.BackendUnavailable") from error
    backend.close()
    raise AssertionError("open() on a dead endpoint succeeded; expected BackendUnavailable")


#: Every check, in the order they run and print.
CHECKS: dict[str, Callable[[BackendHarness], str]] = {
    "round_trip": check_round_trip,
    "overwrite": check_overwrite,
    "delete": check_delete,
    "read_range": check_read_range,
    "capacity": check_capacity,
    "timing": check_timing_contract,
    "concurrency": check_concurrency,
    "cleanup": check_cleanup,
    "describe": check_describe,
    "dead_endpoint": check_dead_endpoint,
}


def run_checks(harness: BackendHarness, names: Iterable[str] | None = None) -> list[CheckResult]:
    """Run checks without pytest; a failure is recorded, never raised, so every check reports.

    ``kvbench_core.contracts.errors.UserError`` (a tier that cannot be selected or opened)
    is recorded as a failure of the check that hit it, with its one-line message.
    """
    results = []
    for name in names or CHECKS:
        try:
            detail = CHECKS[name](harness)
        except CheckSkipped as skipped:
            results.append(CheckResult(name, "skip", str(skipped)))
        except Exception as error:
            results.append(CheckResult(name, "fail", str(error) or type(error).__name__))
        else:
            results.append(CheckResult(name, "pass", detail))
    return results
