"""The conformance checks, in the order they run, runnable with or without pytest (``kvbench plugins --conformance``).

The checks of a backend's data (round trips, overwrite, delete, ranges, timing, threads, capacity, describe)
are here; those of what it owns over its life (cleanup, dead endpoint) in ``lifecycle``; the payloads and
sinks they share in ``probes``; how they obtain backends in ``harness``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable

import numpy as np

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.contracts.conformance.harness import BackendHarness, CheckResult, CheckSkipped
from kvbench_core.contracts.conformance.lifecycle import check_cleanup, check_dead_endpoint
from kvbench_core.contracts.conformance.probes import verify_entry, write_entry


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
