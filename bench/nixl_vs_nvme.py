"""The nixl tier (NIXL's POSIX plugin) beside the nvme tier on the same files, sizes and concurrency.

Needs: the nvme and nixl plugins with NIXL: pip install -e plugins/kvbench_nvme -e 'plugins/kvbench_nixl[nixl]'.

Both tiers write their entry files into one directory on one filesystem, with the same transfer size,
queue depth, ``fsync`` after each write and page-cache drop before each read; ``threads`` threads each
write and then read back their own entries, as ``concurrency`` operations of the cache would.  Repeats
alternate which tier goes first, so drift hits both alike.  Per tier and direction it reports the median
bandwidth (GB/s, 10^9 bytes), the device share (summed ``IOTiming.device`` / summed ``total``) and the
process CPU seconds per GB moved (all threads, NIXL's included); then the ratios nixl / nvme measured in
the same run.  Record the JSON (every sample is in it) under docs/bench/ and the medians in
docs/PERFORMANCE.md ("NIXL").

Keep it short on a shared machine: the defaults move 2 x 2 x 8 x 16 MiB per tier and repeat.

    .venv/bin/python bench/nixl_vs_nvme.py --dir /var/tmp/kvb-nixl --entry-mib 16 --entries 8 --threads 2
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme and nixl plugins with NIXL: pip install -e plugins/kvbench_nvme -e 'plugins/kvbench_nixl[nixl]'",
     modules=("kvbench_nvme", "kvbench_nixl", "nixl_cu12|nixl_cu13|nixl"))

import argparse
import json
import statistics
import threading
import time
from typing import Any

from kvbench_nixl.backend import NixlBackend
from kvbench_nvme.backend import NVMeBackend

from kvbench_core.contracts.backend import DISCARD, BackendContext, IOTiming, StorageBackend
from kvbench_core.contracts.payload import NoisePool


def make(kind: str, directory: str, args: argparse.Namespace) -> StorageBackend:
    common = {"path": f"{directory}/{kind}", "transfer_size": f"{args.transfer_kib}KiB",
              "queue_depth": args.queue_depth, "fsync": True, "drop_cache": True}
    context = BackendContext(tier_name=kind, run_id=f"bench-{kind}", concurrency=args.threads)
    if kind == "nvme":
        return NVMeBackend(common, context)
    return NixlBackend({**common, "nixl_backend": "POSIX", "params": json.loads(args.params),
                        "agents": args.agents}, context)


def phase(backend: StorageBackend, pool: NoisePool, args: argparse.Namespace, writing: bool) -> dict[str, float]:
    """Every thread writes (or reads) its entries; wall time, summed device and total, CPU seconds."""
    size = args.entry_mib << 20
    timings: list[IOTiming] = []
    lock = threading.Lock()
    barrier = threading.Barrier(args.threads + 1)

    def worker(index: int) -> None:
        barrier.wait()
        for n in range(args.entries):
            key = f"t{index}-{n}"
            timing = backend.write(key, pool.payload(key, size)) if writing else backend.read(key, size, DISCARD)
            with lock:
                timings.append(timing)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    cpu0 = time.process_time()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    moved = size * args.entries * args.threads
    return {"gb_per_s": moved / wall / 1e9,
            "device_share": sum(t.device for t in timings) / sum(t.total for t in timings),
            "cpu_s_per_gb": cpu / (moved / 1e9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/var/tmp/kvbench-nixl-bench", help="a fresh or kvbench-made directory")
    parser.add_argument("--entry-mib", type=int, default=16)
    parser.add_argument("--entries", type=int, default=8, help="per thread")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--transfer-kib", type=int, default=1024)
    parser.add_argument("--queue-depth", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--agents", choices=["separate", "shared"], default="separate",
                        help="one NIXL agent per thread (the tier's default) or one shared by all")
    parser.add_argument("--params", default="{}", help='NIXL POSIX plugin parameters, e.g. \'{"use_uring": true}\'')
    args = parser.parse_args()
    pool = NoisePool(seed=5, pool_bytes=32 << 20, max_piece=args.transfer_kib << 10)
    backends = {kind: make(kind, args.dir, args) for kind in ("nvme", "nixl")}
    for backend in backends.values():
        backend.open()
    samples: dict[str, dict[str, list[dict[str, float]]]] = {k: {"write": [], "read": []} for k in backends}
    nixl = backends["nixl"].describe()["driver_layer"]
    try:
        for repeat in range(args.repeats):
            order = list(backends) if repeat % 2 == 0 else list(reversed(backends))
            for kind in order:
                samples[kind]["write"].append(phase(backends[kind], pool, args, writing=True))
                samples[kind]["read"].append(phase(backends[kind], pool, args, writing=False))
    finally:
        for backend in backends.values():
            backend.close()
    medians: dict[str, Any] = {kind: {op: {metric: round(statistics.median(s[metric] for s in runs), 4)
                                           for metric in runs[0]} for op, runs in ops.items()}
                               for kind, ops in samples.items()}
    nixl_m, nvme_m = medians["nixl"], medians["nvme"]
    ratios = {op: {"bandwidth_nixl_over_nvme": round(nixl_m[op]["gb_per_s"] / nvme_m[op]["gb_per_s"], 3),
                   "cpu_per_gb_nixl_over_nvme": round(nixl_m[op]["cpu_s_per_gb"] / nvme_m[op]["cpu_s_per_gb"], 3)}
              for op in ("write", "read")}
    print(json.dumps({"entry_mib": args.entry_mib, "entries_per_thread": args.entries, "threads": args.threads,
                      "transfer_kib": args.transfer_kib, "queue_depth": args.queue_depth, "repeats": args.repeats,
                      "nixl": nixl, "nixl_params": json.loads(args.params), "agents": args.agents,
                      "median": medians, "ratios": ratios, "samples": samples},
                     indent=2))


if __name__ == "__main__":
    main()
