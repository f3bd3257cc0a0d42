"""The DRAM tier's write and read bandwidth beside plain memcpy, measured in one run on this machine.

Needs: kvbench-core alone (pip install -e .).

Write: ``CPUMemoryBackend.write`` of the entries (the arena pre-faulted to their size first, as a run's
set-up does with ``prefault``) against ``memcpy``: ``np.copyto`` of as many bytes out of the payload's
noise pool into the same arena blocks, the copy a write cannot avoid; the tier's write also stamps every
512 B block (kvbench_core/contracts/payload.py), which is what the ratio prices.

Read: ``CPUMemoryBackend.read`` with a discarding sink, which copies every block into the next buffer of
its restore ring (twice the last-level cache), against ``memcpy`` of the same blocks into a ring of the
same size (the floor it must stay at or below) and, for reference, ``memcpy`` into one reused 4 MiB buffer
(the destination the tier used before, which stays in the cache).

Every measure runs once per repeat, in an order that rotates, so drift hits all alike.  Prints one JSON
document with the medians (GB/s, 10^9 bytes), the ratios of the medians, the paired ratios (median and
range of the per-repeat ratios: the figure to quote on a machine whose load drifts) and every repeat;
record them in docs/PERFORMANCE.md.

    .venv/bin/python bench/dram_vs_memcpy.py --entry-mib 256 --entries 2 --repeats 9
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("kvbench-core alone (pip install -e .)",
     modules=("kvbench_core",))

import argparse
import json
import os
import statistics
import time

import numpy as np

from kvbench_core.builtins.memory import BLOCK, CPUMemoryBackend
from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.payload import NoisePool


def copy_seconds(entries: list[list[np.ndarray]], destinations: list[np.ndarray]) -> float:
    """memcpy of every block of ``entries`` into ``destinations`` taken in turn (a ring, or one buffer)."""
    start = time.perf_counter()
    turn = 0
    for blocks in entries:
        for block in blocks:
            destination = destinations[turn % len(destinations)]
            np.copyto(destination[: block.shape[0]], block)
            turn += 1
    return time.perf_counter() - start


def fill_seconds(entries: list[list[np.ndarray]], pool: NoisePool) -> float:
    """memcpy out of the noise pool into the entries' blocks: a write's unavoidable copy, no stamps."""
    start = time.perf_counter()
    at = 0
    for blocks in entries:
        for block in blocks:
            np.copyto(block, pool.data[at:at + block.shape[0]])
            at = (at + block.shape[0]) % pool.pool_bytes
    return time.perf_counter() - start


def tier_read_seconds(backend: CPUMemoryBackend, keys: list[str], size: int) -> float:
    start = time.perf_counter()
    for key in keys:
        backend.read(key, size, DISCARD)
    return time.perf_counter() - start


def tier_write_seconds(backend: CPUMemoryBackend, pool: NoisePool, keys: list[str], size: int) -> float:
    for key in keys:  # the blocks go back to the arena (untimed), so the timed writes reuse faulted ones
        backend.delete(key)
    start = time.perf_counter()
    for key in keys:
        backend.write(key, pool.payload(key, size))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entry-mib", type=int, default=256)
    parser.add_argument("--entries", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    size = args.entry_mib << 20
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="bench"))
    backend.open()  # makes and touches the restore ring
    backend.reserve(size * args.entries)  # what a run's set-up does with prefault (the default)
    pool = NoisePool(seed=1, pool_bytes=32 << 20, max_piece=BLOCK)
    keys = [f"entry{i}" for i in range(args.entries)]
    tier_write_seconds(backend, pool, keys, size)
    entries = [backend._entry(key) for key in keys]  # the very blocks the tier holds
    ring = [np.ones(BLOCK, dtype=np.uint8) for _ in range(backend._restore.slots)]
    one = [np.ones(BLOCK, dtype=np.uint8)]
    measures = {
        "write_memcpy": lambda: fill_seconds(entries, pool),
        "write_tier": lambda: tier_write_seconds(backend, pool, keys, size),
        "read_memcpy_ring": lambda: copy_seconds(entries, ring),
        "read_memcpy_one_buffer": lambda: copy_seconds(entries, one),
        "read_tier": lambda: tier_read_seconds(backend, keys, size),
    }
    for measure in measures.values():  # warm: caches, lazily made buffers
        measure()
    entries[:] = [backend._entry(key) for key in keys]  # the writes took the blocks anew
    moved = size * len(keys)
    runs: dict[str, list[float]] = {name: [] for name in measures}
    names = list(measures)
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(moved / measures[name]() / 1e9)
            entries[:] = [backend._entry(key) for key in keys]
    backend.close()
    median = {name: statistics.median(values) for name, values in runs.items()}

    def paired(tier: str, floor: str) -> dict[str, float]:
        """The median and range of the per-repeat ratios: both measured minutes apart at most, so drift in
        the machine's load between repeats cancels, which a ratio of two medians does not do."""
        ratios = [a / b for a, b in zip(runs[tier], runs[floor], strict=True)]
        return {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                "max": round(max(ratios), 3)}

    print(json.dumps({
        "entry_mib": args.entry_mib, "entries": args.entries, "repeats": args.repeats,
        "restore_ring_mib": backend._restore.nbytes >> 20,
        "gb_per_s": {name: round(value, 3) for name, value in median.items()},
        "write_tier_over_memcpy": round(median["write_tier"] / median["write_memcpy"], 3),
        "read_tier_over_memcpy_ring": round(median["read_tier"] / median["read_memcpy_ring"], 3),
        "one_buffer_over_ring": round(median["read_memcpy_one_buffer"] / median["read_memcpy_ring"], 3),
        "paired": {"write_tier_over_memcpy": paired("write_tier", "write_memcpy"),
                   "read_tier_over_memcpy_ring": paired("read_tier", "read_memcpy_ring"),
                   "one_buffer_over_ring": paired("read_memcpy_one_buffer", "read_memcpy_ring")},
        "runs": {name: [round(value, 3) for value in values] for name, values in runs.items()},
        "load_average": os.getloadavg(),
    }, indent=2))


if __name__ == "__main__":
    main()
