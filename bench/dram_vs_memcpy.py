"""The DRAM tier's read bandwidth beside plain memcpy, measured in one run on this machine.

Needs: kvbench-core alone: pip install -e ..

A read from the ``cpu`` tier copies every 4 MiB block of the entry into a reused destination buffer (the
stand-in for the buffer the KV is restored into).  Its bandwidth must therefore be at most memcpy's: a
figure above it would mean the tier hands out views instead of moving bytes.  This script measures, in
alternating repeats so drift hits both alike:

- ``memcpy``: ``np.copyto`` of the same entries, block by block, into one reused 4 MiB buffer (what the
  tier must cost at least);
- ``dram_tier``: ``CPUMemoryBackend.read`` of the same entries with a discarding sink (what kvbench
  reports as the tier's read bandwidth).

Prints one JSON document with both medians (GB/s, 10^9 bytes), their ratio and the cost per GB; record the
numbers in docs/PERFORMANCE.md.

    .venv/bin/python bench/dram_vs_memcpy.py --entry-mib 256 --entries 4 --repeats 7
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("kvbench-core alone: pip install -e .",
     modules=("kvbench_core",))

import argparse
import json
import statistics
import time

import numpy as np

from kvbench_core.builtins.memory import BLOCK, CPUMemoryBackend
from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.payload import NoisePool


def memcpy_seconds(entries: list[list[np.ndarray]], destination: np.ndarray) -> float:
    start = time.perf_counter()
    for blocks in entries:
        for block in blocks:
            np.copyto(destination[: block.shape[0]], block)
    return time.perf_counter() - start


def tier_seconds(backend: CPUMemoryBackend, keys: list[str], size: int) -> float:
    start = time.perf_counter()
    for key in keys:
        backend.read(key, size, DISCARD)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entry-mib", type=int, default=256)
    parser.add_argument("--entries", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    size = args.entry_mib << 20
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="bench"))
    backend.open()
    pool = NoisePool(seed=1, pool_bytes=32 << 20, max_piece=BLOCK)
    keys = [f"entry{i}" for i in range(args.entries)]
    for key in keys:
        backend.write(key, pool.payload(key, size))
    # The very blocks the tier holds: memcpy and the tier read the same memory.
    entries = [backend._entry(key) for key in keys]
    destination = np.empty(BLOCK, dtype=np.uint8)
    memcpy_seconds(entries, destination)  # fault in the destination and warm the caches for both
    tier_seconds(backend, keys, size)
    memcpy_gbps, tier_gbps = [], []
    moved = size * len(keys)
    for repeat in range(args.repeats):
        if repeat % 2:  # alternate which goes first, so neither always runs on a warmer machine
            tier_gbps.append(moved / tier_seconds(backend, keys, size) / 1e9)
            memcpy_gbps.append(moved / memcpy_seconds(entries, destination) / 1e9)
        else:
            memcpy_gbps.append(moved / memcpy_seconds(entries, destination) / 1e9)
            tier_gbps.append(moved / tier_seconds(backend, keys, size) / 1e9)
    backend.close()
    memcpy, tier = statistics.median(memcpy_gbps), statistics.median(tier_gbps)
    print(json.dumps({
        "entry_mib": args.entry_mib, "entries": args.entries, "repeats": args.repeats,
        "memcpy_gb_per_s": round(memcpy, 3), "dram_tier_read_gb_per_s": round(tier, 3),
        "tier_over_memcpy": round(tier / memcpy, 4),
        "dram_tier_read_ms_per_gb": round(1000 / tier, 3), "memcpy_ms_per_gb": round(1000 / memcpy, 3),
        "memcpy_runs": [round(v, 3) for v in memcpy_gbps], "tier_runs": [round(v, 3) for v in tier_gbps],
    }, indent=2))


if __name__ == "__main__":
    main()
