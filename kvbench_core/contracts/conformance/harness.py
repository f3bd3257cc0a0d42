"""How the conformance checks obtain backends, payloads and buffers, and how a check reports its outcome."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.payload import NoisePool

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
