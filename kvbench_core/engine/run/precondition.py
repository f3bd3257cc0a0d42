"""Preconditioning (seed §4.8 / SNIA practice): fill the bottom tier before measuring.

Sequential writes of ``entry_size`` pieces into the bottom tier until ``size``
bytes (default: twice the tier's capacity) have been written, from several
threads, cycling over a ring of keys that fits the tier so it never overflows.
The entries are deleted afterwards; telemetry is reset when measuring starts.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvbench_core.contracts.errors import SpecError, StorageError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.tier_ops import describe_error


def precondition_bottom_tier(tier: Tier, pool: NoisePool, options: dict[str, Any],
                             stop: threading.Event) -> dict[str, Any]:
    entry_size = int(options["entry_size"])
    if options["size"] == "auto":
        if math.isinf(tier.capacity):
            raise SpecError("precondition.size: 'auto' needs a bounded bottom tier; give a size")
        total = int(2 * tier.capacity)
    else:
        total = int(options["size"])
    ring = max(1, int(tier.capacity * 0.5) // entry_size) if not math.isinf(tier.capacity) else 64
    count = -(-total // entry_size)
    keys = [f"precondition-{i}" for i in range(min(ring, count))]
    start = time.perf_counter()

    locks = [threading.Lock() for _ in keys]
    failed = threading.Event()

    def write(i: int) -> int:
        if stop.is_set() or failed.is_set():
            return 0
        key = keys[i % len(keys)]
        with locks[i % len(keys)]:  # a fast thread may come round the ring while a slow one still writes
            try:
                tier.backend.write(key, pool.payload(f"{key}-{i}", entry_size))
            except Exception as error:  # a full disk, a dead server: the run's StorageError, and no more writes
                failed.set()
                raise StorageError(tier.name, "write", key, describe_error(error)) from error
        return entry_size

    try:
        with ThreadPoolExecutor(max_workers=int(options["threads"])) as executor:
            written = sum(executor.map(write, range(count)))
    except StorageError:
        for key in keys:
            with contextlib.suppress(Exception):  # best effort; the backend's close() removes its files too
                tier.backend.delete(key)
        raise
    for key in keys:
        try:
            tier.backend.delete(key)
        except Exception as error:
            raise StorageError(tier.name, "delete", key, describe_error(error)) from error
    seconds = time.perf_counter() - start
    return {"tier": tier.name, "bytes": written, "seconds": round(seconds, 3),
            "bandwidth_bytes_per_s": written / seconds if seconds > 0 else None}
