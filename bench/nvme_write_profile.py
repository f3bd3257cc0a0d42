"""Where the nvme tier's O_DIRECT write CPU goes: payload rendering vs the I/O path, per engine and queue depth.

Needs: the nvme plugin and fio: pip install -e plugins/kvbench_nvme; apt-get install fio.

CPU per GiB is split by subtraction in one process, each phase measured with
``RUSAGE_SELF`` (every thread; user and system separately):

* ``write``: the real O_DIRECT + fsync write of ``--concurrency`` entries;
* ``fill only``: the same pieces rendered into a page-aligned buffer, no I/O
  (what ``source.fill`` costs: a copy out of the 64 MiB noise pool and the
  512 B stamps);
* ``I/O only``: the same write with a source that leaves the buffer as it is
  (the engine's Python loop, thread hand-offs, syscalls and the kernel's
  O_DIRECT path, without rendering).

fio's O_DIRECT write of the same shape is run beside it, with and without
``refill_buffers`` (fresh random data per I/O, as kvbench's payload is fresh),
measured as ``bench/nvme_vs_fio.py`` measures it: the whole process
(``RUSAGE_CHILDREN``) less its start-up, user and system apart.  Rounds alternate the engines; medians
are printed.  Sampling profilers (py-spy, perf) were tried too and are not
used here: the data path is a small part of a short process's samples next to
start-up, and py-spy's sampling itself slowed the writes by a third.

    .venv/bin/python bench/nvme_write_profile.py --dir /mnt/nvme/kvbench-prof --entry-size 128MiB
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin and fio: pip install -e plugins/kvbench_nvme; apt-get install fio",
     modules=("kvbench_nvme",), programs=("fio",))

import argparse
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvbench_nvme.backend import NVMeBackend

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.units import parse_size

GIB = float(1 << 30)


class UnfilledSource:
    """A source that leaves the buffer as it is: the write path's CPU without payload rendering."""

    def __init__(self, size: int) -> None:
        self.size = size

    def fill(self, offset: int, out: memoryview) -> None:
        return None


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def per_gib(before: tuple[float, float], after: tuple[float, float], nbytes: int) -> dict[str, float]:
    gib = nbytes / GIB
    return {"user": (after[0] - before[0]) / gib, "system": (after[1] - before[1]) / gib}


def kvbench_phases(backend: NVMeBackend, workers: ThreadPoolExecutor, pool: NoisePool, args: argparse.Namespace,
                   round_index: int) -> dict[str, dict[str, float]]:
    keys = [f"r{round_index}-e{index}" for index in range(args.concurrency)]
    total = args.entry_bytes * args.concurrency
    barrier = threading.Barrier(args.concurrency)

    def run(source_for: Any) -> dict[str, float]:
        def one(key: str) -> None:
            barrier.wait()
            backend.write(key, source_for(key))

        before = cpu()
        list(workers.map(one, keys))
        result = per_gib(before, cpu(), total)
        for key in keys:
            backend.delete(key)
        return result

    def fill_only(key: str) -> None:
        buffer = memoryview(mmap.mmap(-1, args.transfer_bytes))
        payload = pool.payload(key, args.entry_bytes)
        for offset in range(0, args.entry_bytes, args.transfer_bytes):
            payload.fill(offset, buffer[:min(args.transfer_bytes, args.entry_bytes - offset)])

    before = cpu()
    list(workers.map(fill_only, keys))
    fills = per_gib(before, cpu(), total)
    return {"write": run(lambda key: pool.payload(key, args.entry_bytes)), "fill only": fills,
            "I/O only": run(lambda _key: UnfilledSource(args.entry_bytes))}


def children_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def fio_phase(directory: str, args: argparse.Namespace, queue_depth: int, refill: bool) -> dict[str, float]:
    """CPU per GiB of one fio O_DIRECT write job, the whole process less the same job moving one transfer."""
    command = ["fio", "--name=kv", f"--directory={directory}", f"--bs={args.transfer_bytes}",
               f"--numjobs={args.concurrency}", "--group_reporting", "--output-format=json", "--fallocate=none",
               "--rw=write", "--direct=1", "--end_fsync=1", "--randrepeat=0", f"--iodepth={queue_depth}",
               "--ioengine=psync" if queue_depth == 1 else "--ioengine=io_uring",
               *(["--refill_buffers=1"] if refill else [])]
    costs = []
    for size in (args.entry_bytes, args.transfer_bytes):  # the job, then its fixed cost
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        before = children_cpu()
        subprocess.run([*command, f"--size={size}"], capture_output=True, text=True, check=True)
        after = children_cpu()
        costs.append((after[0] - before[0], after[1] - before[1]))
    shutil.rmtree(directory, ignore_errors=True)
    gib = args.entry_bytes * args.concurrency / GIB
    (user, system), (fixed_user, fixed_system) = costs
    return {"user": (user - fixed_user) / gib, "system": (system - fixed_system) / gib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="kvcache/nvme-write-profile")
    parser.add_argument("--entry-size", default="128MiB")
    parser.add_argument("--transfer-size", default="1MiB")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--queue-depths", default="1,4")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    args.entry_bytes, args.transfer_bytes = parse_size(args.entry_size), parse_size(args.transfer_size)
    pool = NoisePool(seed=1, max_piece=max(args.transfer_bytes, 1 << 20))
    samples: dict[str, list[dict[str, float]]] = {}
    os.makedirs(args.dir, exist_ok=True)
    try:
        with ThreadPoolExecutor(args.concurrency) as workers:
            for queue_depth in (int(depth) for depth in args.queue_depths.split(",")):
                backends = {engine: NVMeBackend(
                    {"path": os.path.join(args.dir, engine), "direct": True, "fsync": True, "engine": engine,
                     "queue_depth": queue_depth, "transfer_size": args.transfer_bytes},
                    BackendContext(tier_name="prof", run_id="prof", concurrency=args.concurrency))
                    for engine in ("psync", "io_uring")}
                for backend in backends.values():
                    backend.open()
                try:
                    for round_index in range(args.rounds):
                        for engine, backend in backends.items():
                            for phase, figures in kvbench_phases(backend, workers, pool, args, round_index).items():
                                samples.setdefault(f"qd{queue_depth} kvbench {engine:8} {phase}", []).append(figures)
                        for refill in (False, True):
                            name = f"qd{queue_depth} fio {'refill_buffers' if refill else 'one buffer'}"
                            samples.setdefault(name, []).append(
                                fio_phase(os.path.join(args.dir, "fio"), args, queue_depth, refill))
                finally:
                    for backend in backends.values():
                        backend.close()
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(f"{'CPU s/GiB, median of ' + str(args.rounds):44}{'user':>7}{'system':>8}{'total':>7}")
    for name, rows in samples.items():
        user = statistics.median(row["user"] for row in rows)
        system = statistics.median(row["system"] for row in rows)
        print(f"{name:44}{user:7.3f}{system:8.3f}{user + system:7.3f}")


if __name__ == "__main__":
    main()
