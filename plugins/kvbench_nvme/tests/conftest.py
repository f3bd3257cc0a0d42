"""Fixtures for the nvme tier tests: a small noise pool and opened backends that clean up."""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from kvbench_nvme.backend import NVMeBackend

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.payload import NoisePool, VerifySink

SMALL_TRANSFER = 64 << 10  # small pieces make multi-piece entries cheap


@pytest.fixture(scope="session")
def pool() -> NoisePool:
    return NoisePool(seed=7, pool_bytes=8 << 20, max_piece=4 << 20)


MakeBackend = Callable[..., NVMeBackend]


@pytest.fixture
def count_mmaps(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[Any]]:
    """Call it to start counting buffer allocations (``mmap.mmap`` calls); it returns the list they go to."""

    def start() -> list[Any]:
        allocations: list[Any] = []
        real_mmap = mmap.mmap

        def counting_mmap(*args: Any, **kwargs: Any) -> mmap.mmap:
            allocations.append(args)
            return real_mmap(*args, **kwargs)

        monkeypatch.setattr(mmap, "mmap", counting_mmap)
        return allocations

    return start


@pytest.fixture
def make_backend(tmp_path: Any) -> Iterator[MakeBackend]:
    """Open an NVMeBackend in ``tmp_path/tier`` (options override); closed after the test."""
    opened: list[NVMeBackend] = []

    def make(run_id: str = "run1", keep: bool = False, io_log: Any = None, concurrency: int = 1,
             **options: Any) -> NVMeBackend:
        options.setdefault("path", str(tmp_path / "tier"))
        options.setdefault("transfer_size", SMALL_TRANSFER)
        context = BackendContext(tier_name="nvme0", run_id=run_id, keep=keep, io_log=io_log,
                                 concurrency=concurrency)
        backend = NVMeBackend(options, context)
        try:
            backend.open()
        except BackendUnavailable as error:
            if options.get("direct") and "O_DIRECT" in str(error):
                pytest.skip(f"O_DIRECT unsupported here: {error}")
            raise
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


class RecordingLog:
    """An io_log that keeps every record() call, and (requested, align) where an O_DIRECT tail gave them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, int, float, float]] = []
        self.requests: dict[tuple[str, int], tuple[int, int]] = {}  # (op, offset) -> (requested, align)

    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float,
               requested: int | None = None, align: int | None = None) -> None:
        self.calls.append((key, op, offset, nbytes, start_s, end_s))
        if requested is not None:
            self.requests[(op, offset)] = (requested, align or 0)


@pytest.fixture
def recording_log() -> RecordingLog:
    return RecordingLog()


class CoverageSink:
    """Verifies every piece against the payload and records which ranges arrived."""

    def __init__(self, pool: NoisePool, key: str, scratch_size: int) -> None:
        self.verify = VerifySink(pool, key, np.empty(scratch_size, dtype=np.uint8))
        self.ranges: list[tuple[int, int]] = []

    def consume(self, offset: int, data: memoryview) -> None:
        self.verify.consume(offset, data)
        self.ranges.append((offset, offset + len(data)))

    def assert_exact(self, size: int) -> None:
        assert (self.verify.mismatches, self.verify.first_bad_offset) == (0, None)
        position = 0
        for start, end in sorted(self.ranges):
            assert start == position, f"gap or overlap at byte {position}"
            position = end
        assert position == size


@pytest.fixture
def round_trip(pool: NoisePool) -> Callable[[NVMeBackend, str, int], None]:
    """Write ``size`` payload bytes under ``key``, read them back through a VerifySink, demand equality."""

    def check(backend: NVMeBackend, key: str, size: int) -> None:
        written = backend.write(key, pool.payload(key, size))
        sink = CoverageSink(pool, key, backend.transfer_size)
        read = backend.read(key, size, sink)
        sink.assert_exact(size)
        assert written.nbytes == read.nbytes == size

    return check
