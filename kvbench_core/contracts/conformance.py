"""Conformance suite for storage backends: one class to subclass, the same checks from the CLI.

Every tier, built-in or vendor, must behave the same way towards the cache:
byte-exact round trips at every size, overwrite, idempotent delete, correct
``read_range``, honest ``IOTiming``, thread safety, cleanup on ``close`` and a
clear ``BackendUnavailable`` when the endpoint is dead.  Like fsspec's abstract
test classes, this module holds those checks once so each backend's test
module only says how to build the backend.

Usage from pytest (the whole test module of a tier)::

    from typing import ClassVar
    from kvbench_core.contracts.conformance import BackendConformance

    class TestMyTier(BackendConformance):
        backend_name = "mytier"                                  # name registered by the entry point
        backend_options: ClassVar = {"path": "{tmp_path}/data"}  # "{tmp_path}" becomes pytest's tmp_path

(``ClassVar`` only keeps ruff's RUF012 quiet; a plain assignment works too.)

That collects ``test_conformance[<check>]`` once per check in ``CHECKS``
(``pytest -k round_trip`` selects one).  Optional hooks, override as needed:

- ``make_backend(context, tmp_path)``: build the unopened backend yourself
  (default: the real selection path, ``kvbench_core.engine.factory.create_backend``,
  so option validation and ``requires`` are exercised too).
- ``remaining_entries(backend)``: after ``close()``, what of this run is still
  stored (file names, keys, objects).  Without it the ``cleanup`` check skips.
  For directory tiers ``remaining_files(root)`` is ready-made.
- ``make_dead_backend(context, tmp_path)``: a backend pointed at an endpoint
  that is down (closed port, missing device); its ``open()`` must raise
  ``BackendUnavailable``.  Without it the ``dead_endpoint`` check skips.
- ``sizes``: entry sizes for the round trip (default: 1 byte up to two
  transfer sizes plus an unaligned tail).

Mark a whole class skipped with ``pytestmark = pytest.mark.skipif(...)`` when
its server or device is absent.  pytest is imported only inside the test
method, so this module is importable (and the CLI's ``kvbench plugins check``
runs the same checks) without pytest installed.

Without pytest::

    harness = BackendHarness(factory=lambda ctx: MyBackend({...}, ctx))
    for result in run_checks(harness):
        print(result.name, result.status, result.detail)

A tier's own tests beyond the conformance checks share the helpers at the end
of this module: ``backend_fixtures`` (the ``open_backend`` and ``verify``
fixtures of a conftest), ``backend_opener``, ``verify_read``, ``free_port`` and
``ServerProcess`` (a test server the tests start, crash and stop).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

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


# --- pytest base class ------------------------------------------------------------------------


def _substitute(value: Any, tmp_path: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{tmp_path}", str(tmp_path))
    if isinstance(value, dict):
        return {key: _substitute(item, tmp_path) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, tmp_path) for item in value]
    return value


_tier_counter = itertools.count()


class BackendConformance:
    """Subclass in a tier's test module; set ``backend_name`` and ``backend_options`` (see module doc)."""

    #: Name the backend is registered under (``kvbench_storage_backends``).
    backend_name: ClassVar[str] = ""
    #: The tier's ``options``; the string "{tmp_path}" inside values becomes pytest's ``tmp_path``.
    backend_options: ClassVar[dict[str, Any]] = {}
    #: Optional override of the round-trip sizes: ``f(transfer_size) -> [sizes]``.
    sizes: ClassVar[Callable[[int], list[int]] | None] = None

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        """The unopened backend under test; by default through the same factory a run spec uses."""
        from kvbench_core.engine.factory import create_backend

        tier = {"name": f"conformance{next(_tier_counter)}", "backend": self.backend_name,
                "options": _substitute(self.backend_options, tmp_path)}
        return create_backend(tier, context, path=f"{type(self).__name__}.backend_options")

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str] | None:
        """Override: what ``backend`` (already closed) left stored.  None skips the cleanup check."""
        return None

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend | None:
        """Override: a backend whose ``open()`` must raise ``BackendUnavailable``.  None skips the check."""
        return None

    def conformance_harness(self, tmp_path: Path) -> BackendHarness:
        """The harness the checks run against, assembled from the hooks above."""
        probe_defined = type(self).remaining_entries is not BackendConformance.remaining_entries
        dead_defined = type(self).make_dead_backend is not BackendConformance.make_dead_backend

        def remaining(backend: StorageBackend) -> Iterable[str]:
            return self.remaining_entries(backend) or []

        def dead(context: BackendContext) -> StorageBackend:
            backend = self.make_dead_backend(context, tmp_path)
            if backend is None:
                raise CheckSkipped("make_dead_backend() returned None on this machine")
            return backend

        sizes = type(self).sizes
        return BackendHarness(
            factory=lambda context: self.make_backend(context, tmp_path),
            remaining_entries=remaining if probe_defined else None,
            dead_factory=dead if dead_defined else None,
            sizes=sizes,
        )

    def pytest_generate_tests(self, metafunc: Any) -> None:
        """pytest hook (found on the class): one ``test_conformance`` case per check."""
        if "conformance_check" in metafunc.fixturenames:
            metafunc.parametrize("conformance_check", list(CHECKS))

    def test_conformance(self, conformance_check: str, tmp_path: Path) -> None:
        import pytest

        try:
            CHECKS[conformance_check](self.conformance_harness(tmp_path))
        except CheckSkipped as skipped:
            pytest.skip(str(skipped))


# --- helpers for a tier's own tests -----------------------------------------------------------

B = TypeVar("B", bound=StorageBackend)


@contextmanager
def backend_opener(cls: Callable[[dict[str, Any], BackendContext], B], tier_name: str) -> Iterator[Callable[..., B]]:
    """``make(options, *, run_id=None, keep=False, concurrency=2)``: build and open a ``cls`` backend.

    Each backend gets a unique run id unless the test names one (two backends
    sharing a run id see each other's entries), so tests against one shared
    server never collide.  Every backend ``make`` opened is closed on exit,
    also one the test closed itself: its ``close()`` must then do nothing.
    """
    opened: list[B] = []

    def make(options: dict[str, Any], *, run_id: str | None = None, keep: bool = False,
             concurrency: int = 2) -> B:
        context = BackendContext(tier_name=tier_name, run_id=run_id or f"t{uuid.uuid4().hex[:8]}", keep=keep,
                                 concurrency=concurrency)
        backend = cls(options, context)
        backend.open()
        opened.append(backend)
        return backend

    try:
        yield make
    finally:
        for backend in opened:
            backend.close()


def verify_read(pool: NoisePool, backend: StorageBackend, key: str, size: int) -> None:
    """Read ``key`` back through a ``VerifySink`` and fail unless it returns exactly the payload's ``size`` bytes."""
    sink = VerifySink(pool, key, np.empty(pool.max_piece, dtype=np.uint8))
    timing = backend.read(key, size, sink)
    if (sink.mismatches, sink.first_bad_offset) != (0, None):
        raise AssertionError(f"{key} ({size} B) came back wrong ({sink.mismatches} bad pieces, "
                             f"first at offset {sink.first_bad_offset})")
    if timing.nbytes != size:
        raise AssertionError(f"read of {key} ({size} B): IOTiming.nbytes is {timing.nbytes}")


def backend_fixtures(cls: Callable[[dict[str, Any], BackendContext], B], tier_name: str) -> tuple[Any, Any]:
    """The pytest fixtures ``open_backend`` (``backend_opener``) and ``verify`` (``verify_read``), for a conftest::

        open_backend, verify = backend_fixtures(MyBackend, "mytier")

    ``verify(backend, key, size)`` uses the conftest's ``pool`` fixture: the
    ``NoisePool`` the test's writes were generated from.
    """
    import pytest

    @pytest.fixture
    def open_backend() -> Iterator[Callable[..., B]]:
        """Build and open a backend (``run_id`` unique unless given); closed after the test."""
        with backend_opener(cls, tier_name) as make:
            yield make

    @pytest.fixture
    def verify(pool: NoisePool) -> Callable[[StorageBackend, str, int], None]:
        """Read ``key`` back through a VerifySink and demand the exact payload bytes."""
        return functools.partial(verify_read, pool)

    return open_backend, verify
