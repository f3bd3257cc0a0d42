"""kvbench's nvme tier against fio on the same filesystem, entry sizes and concurrency, side by side.

For each mode (``buffered``: page cache + fsync on write, page cache dropped
before read; ``direct``: O_DIRECT + fsync) and each queue depth, every repeat
runs the four phases fio write, kvbench write, fio read, kvbench read (which
tool goes first alternates between repeats, so drift on a shared device hits
both alike) and reports median bandwidths and the kvbench/fio ratio.

Matching the two:

* concurrency ``C``: fio ``numjobs=C`` (one file per job), kvbench ``C``
  threads each writing/reading one entry file;
* entry size = fio ``size``; transfer size = fio ``bs``;
* queue depth ``Q``: fio ``iodepth=Q`` (``psync`` at Q=1, ``io_uring`` above),
  kvbench ``queue_depth=Q`` (Q preads/pwrites in flight per entry);
* buffered write: fio ``end_fsync=1`` (its runtime includes the fsync),
  kvbench ``fsync: true``; buffered read: fio ``invalidate=1``, kvbench
  ``drop_cache: true``; direct: ``direct=1`` / ``direct: true`` (+ fsync);
* fresh files for every write (fio ``fallocate=none``, files unlinked
  first), so both pay block allocation.

On a virtual disk the hypervisor may cache what the guest read or wrote, so
one read of a file comes from the media and the next from host memory, and a
comparison turns into a coin toss; ``--prewarm-reads`` times only the second
of two reads of every file, so every tool meets the same backing state.

CPU cost is CPU time (user + system) per GiB moved: ``RUSAGE_SELF`` around
kvbench's phase, fio's own per-job ``usr_cpu``/``sys_cpu`` for fio.  The host share is
kvbench's L4 host time over its per-operation total.

    .venv/bin/python bench/nvme_vs_fio.py --dir /mnt/nvme/kvbench-bench --entry-size 256MiB
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench_nvme.backend import NVMeBackend
from kvbench_nvme.fsinfo import describe_location

from kvbench_core.contracts.backend import DISCARD, BackendContext, IOTiming
from kvbench_core.engine.payload import NoisePool
from kvbench_core.spec.units import format_bytes, parse_size

GIB = float(1 << 30)


@dataclass
class Sample:
    """One phase of one tool: bandwidth, CPU seconds per GiB, and (kvbench) the L4 shares."""

    bandwidth: float  # bytes per second
    cpu_per_gib: float
    host_share: float | None = None
    device_share: float | None = None


#: fio as it runs by default (one buffer, lightly scrambled per I/O, so its content repeats) and fio
#: making fresh random data for every I/O, like kvbench's unique, undedupable payload.
FIO_VARIANTS = {"fio": [], "fio-fresh": ["--refill_buffers=1"]}
TOOLS = [*FIO_VARIANTS, "kvbench"]


@dataclass
class Comparison:
    """All samples of one (mode, queue depth, op) cell, per tool."""

    mode: str
    queue_depth: int
    op: str
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {tool: [] for tool in TOOLS})

    def median(self, tool: str, attribute: str) -> float:
        return statistics.median(getattr(sample, attribute) for sample in self.samples[tool])

    def ratio(self, baseline: str) -> float:
        return self.median("kvbench", "bandwidth") / self.median(baseline, "bandwidth")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def fio_command(directory: str, op: str, mode: str, args: argparse.Namespace, queue_depth: int,
                variant: str) -> list[str]:
    command = [
        "fio", *FIO_VARIANTS[variant], "--name=kv", f"--directory={directory}",
        f"--size={args.entry_bytes}", f"--bs={args.transfer_bytes}",
        f"--numjobs={args.concurrency}", "--group_reporting", "--output-format=json", "--fallocate=none",
        f"--rw={op}", f"--direct={int(mode == 'direct')}",
        "--ioengine=psync" if queue_depth == 1 else "--ioengine=io_uring",
        f"--iodepth={queue_depth}",
    ]
    command.append("--end_fsync=1" if op == "write" else "--invalidate=1")
    return command


def run_fio(directory: str, op: str, mode: str, args: argparse.Namespace, queue_depth: int, variant: str) -> Sample:
    if op == "write":
        for name in os.listdir(directory):  # fresh files, as kvbench's entries are
            os.unlink(os.path.join(directory, name))
    done = subprocess.run(fio_command(directory, op, mode, args, queue_depth, variant), capture_output=True,
                          text=True, check=True)
    job = json.loads(done.stdout[done.stdout.index("{"):])["jobs"][0]  # group_reporting: all jobs summed
    # fio's own CPU accounting of its jobs (job_runtime is summed over jobs), without its ~0.4 s start-up
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
    moved = job[op]["io_bytes"]
    return Sample(bandwidth=job[op]["bw_bytes"], cpu_per_gib=cpu / (moved / GIB))


def run_kvbench(backend: NVMeBackend, workers: ThreadPoolExecutor, pool: NoisePool, op: str,
                args: argparse.Namespace) -> Sample:
    barrier = threading.Barrier(args.concurrency)
    if op == "write":
        for index in range(args.concurrency):  # fresh files, as fio's are (untimed)
            backend.delete(f"entry{index}")

    def one(index: int) -> tuple[float, float, IOTiming]:
        key = f"entry{index}"
        barrier.wait()
        start = time.perf_counter()
        if op == "write":
            timing = backend.write(key, pool.payload(key, args.entry_bytes))
        else:
            timing = backend.read(key, args.entry_bytes, DISCARD)
        return start, time.perf_counter(), timing

    cpu_before = cpu_seconds()
    results = list(workers.map(one, range(args.concurrency)))
    cpu = cpu_seconds() - cpu_before
    wall = max(end for _, end, _ in results) - min(start for start, _, _ in results)
    timings = [timing for _, _, timing in results]
    moved = sum(timing.nbytes for timing in timings)
    total = sum(timing.total for timing in timings)
    return Sample(bandwidth=moved / wall, cpu_per_gib=cpu / (moved / GIB),
                  host_share=sum(timing.host for timing in timings) / total,
                  device_share=sum(timing.device for timing in timings) / total)


def compare(mode: str, queue_depth: int, args: argparse.Namespace, pool: NoisePool) -> list[Comparison]:
    fio_dirs = {variant: os.path.join(args.dir, variant) for variant in FIO_VARIANTS}
    for directory in fio_dirs.values():
        os.makedirs(directory, exist_ok=True)
    options = {"path": os.path.join(args.dir, "kvbench"), "direct": mode == "direct", "fsync": True,
               "drop_cache": True, "queue_depth": queue_depth, "transfer_size": args.transfer_bytes}
    backend = NVMeBackend(options, BackendContext(tier_name="bench", run_id="bench", concurrency=args.concurrency))
    backend.open()
    results = {op: Comparison(mode, queue_depth, op) for op in ("write", "read")}
    try:
        with ThreadPoolExecutor(args.concurrency) as workers:
            for repeat in range(args.repeats):
                order = TOOLS[repeat % len(TOOLS):] + TOOLS[:repeat % len(TOOLS)]  # nobody always goes first
                for op in ("write", "read"):
                    passes = 2 if op == "read" and args.prewarm_reads else 1
                    for tool in order:
                        for _ in range(passes):  # with --prewarm-reads the first pass is not kept
                            if tool == "kvbench":
                                sample = run_kvbench(backend, workers, pool, op, args)
                            else:
                                sample = run_fio(fio_dirs[tool], op, mode, args, queue_depth, tool)
                        results[op].samples[tool].append(sample)
                        print(f"  {mode:8} qd={queue_depth:<3} {op:5} {tool:9} "
                              f"{sample.bandwidth / 2**20:9.1f} MiB/s", flush=True)
    finally:
        backend.close()
        for directory in fio_dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    return list(results.values())


def machine(directory: str) -> dict[str, Any]:
    cpu_model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    return {"kernel": platform.release(), "cpu": cpu_model, "cpus": os.cpu_count(), "fio": fio_version,
            "python": platform.python_version(), **describe_location(directory)}


def table(comparisons: list[Comparison]) -> str:
    """Medians: bandwidth in MiB/s per tool, kvbench's ratios, CPU s/GiB, kvbench's L4 shares."""
    lines = [f"{'mode':9}{'qd':>3} {'op':6}{'fio':>8}{'fio-fresh':>10}{'kvbench':>9}{'kv/fio':>8}{'kv/fresh':>9}"
             f"{'CPU fresh':>10}{'CPU kv':>8}{'host %':>8}{'device %':>9}"]
    for row in comparisons:
        bandwidths = "".join(f"{row.median(tool, 'bandwidth') / 2**20:>{width}.1f}"
                             for tool, width in zip(TOOLS, (8, 10, 9), strict=True))
        lines.append(
            f"{row.mode:9}{row.queue_depth:>3} {row.op:6}{bandwidths}"
            f"{row.ratio('fio'):>8.2f}{row.ratio('fio-fresh'):>9.2f}"
            f"{row.median('fio-fresh', 'cpu_per_gib'):>10.2f}{row.median('kvbench', 'cpu_per_gib'):>8.2f}"
            f"{100 * row.median('kvbench', 'host_share'):>8.1f}{100 * row.median('kvbench', 'device_share'):>9.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="kvcache/nvme-vs-fio", help="scratch directory on the filesystem under test")
    parser.add_argument("--entry-size", default="256MiB",
                        help="bytes per entry: llama3.1-8b is 131072 B/token, so 256MiB = 2048 tokens")
    parser.add_argument("--transfer-size", default="1MiB", help="bytes per pread/pwrite (fio bs)")
    parser.add_argument("--concurrency", type=int, default=2, help="entries in flight (fio numjobs)")
    parser.add_argument("--queue-depths", default="1,4", help="comma-separated queue depths per entry")
    parser.add_argument("--modes", default="buffered,direct", help="buffered and/or direct")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prewarm-reads", action="store_true",
                        help="time only the second of two reads of each file (the guest page cache is dropped "
                             "before both): for virtual disks whose host caches what was read once")
    parser.add_argument("--json", help="also write the samples and machine description here")
    args = parser.parse_args()
    if shutil.which("fio") is None:
        parser.error("fio is not installed (apt-get install fio)")
    args.entry_bytes = parse_size(args.entry_size)  # fio gets plain bytes: it reads "1MiB" as 10^6
    args.transfer_bytes = parse_size(args.transfer_size)
    os.makedirs(args.dir, exist_ok=True)
    about = machine(args.dir)
    print(json.dumps(about, indent=1))
    print(f"entry {format_bytes(args.entry_bytes)}, transfer {args.transfer_size}, concurrency {args.concurrency}, "
          f"{args.repeats} repeats (median)")
    pool = NoisePool(seed=1, max_piece=max(args.transfer_bytes, 1 << 20))
    comparisons: list[Comparison] = []
    for mode in args.modes.split(","):
        for queue_depth in (int(depth) for depth in args.queue_depths.split(",")):
            comparisons += compare(mode, queue_depth, args, pool)
    print(table(comparisons))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": about, "args": vars(args),
                       "results": [asdict(row) | {"ratio": {base: row.ratio(base) for base in FIO_VARIANTS}}
                                   for row in comparisons]}, out, indent=1)
    with_contents = os.listdir(args.dir)
    if not with_contents:
        os.rmdir(args.dir)


if __name__ == "__main__":
    main()
