"""kvbench's nvme tier against fio on the same filesystem, entry sizes and concurrency, side by side.

Needs: the nvme plugin and fio: pip install -e plugins/kvbench_nvme; apt-get install fio.

For each mode (``buffered``: page cache + fsync on write, page cache dropped
before read; ``direct``: O_DIRECT + fsync) and each queue depth, every repeat
runs each tool's write, then each tool's read (which tool goes first rotates
between repeats, so drift on a shared device hits all alike) and reports
median bandwidths and kvbench/fio ratios.

Matching the two (each kvbench row names the fio job it is compared with):

* concurrency ``C``: fio ``numjobs=C`` (one file per job), kvbench ``C``
  threads each writing/reading one entry file;
* entry size = fio ``size``; transfer size = fio ``bs``;
* queue depth ``Q`` means commands in flight per file, as fio's ``iodepth``:
  ``kvbench io_uring`` (``engine: io_uring``, ``queue_depth: Q``) against
  ``fio io_uring`` (``ioengine=io_uring``, ``iodepth=Q``), at every Q and in both
  modes; ``kvbench psync`` (``engine: psync``) at Q=1 against ``fio psync``, and
  with O_DIRECT at Q>1 (Q threads with a ``pwrite``/``preadv`` each in flight on
  one file) against ``fio io_uring`` at ``iodepth=Q``.  Buffered psync keeps one
  command per file whatever Q says (docs/tiers/nvme.md), so it has no Q>1 row:
  it would be its Q=1 row against a deeper fio;
* buffered write: fio ``end_fsync=1`` (its runtime includes the fsync),
  kvbench ``fsync: true``; buffered read: fio ``invalidate=1``, kvbench
  ``drop_cache: true``; direct: ``direct=1`` / ``direct: true`` (+ fsync);
* unique data on both sides: fio ``refill_buffers=1`` (fresh random data for
  every I/O) and ``randrepeat=0`` (a new seed every run), kvbench's stamped
  payload under a new key every repeat;
* fresh files for every write (fio ``fallocate=none``, files unlinked
  first; kvbench's entries deleted, untimed), so both pay block allocation;
* physically contiguous buffers on both sides: kvbench's are huge-page backed
  (``kvbench_nvme/buffers.py``); fio's ``malloc``'d ones are scattered 4 KiB
  pages, which on a virtual disk cost per segment (a 1 MiB command even split
  in two on virtio_blk), so give fio huge pages with ``--fio-hugetlbfs DIR``
  (a mounted hugetlbfs with a few free huge pages: fio ``mem=mmaphuge``):

      echo 32 > /proc/sys/vm/nr_hugepages; mkdir -p /mnt/huge; mount -t hugetlbfs none /mnt/huge

Reads are of the files the same repeat just wrote, the guest page cache
dropped, by each tool alike.  A virtual disk's host may still serve them from
its own cache; that cannot be dropped from inside the guest, so it is not
hidden either: every sample records the block device's request count and
bytes (``/proc/diskstats`` deltas, which other processes on the same disk
disturb) next to its bandwidth.

Entries per stream ``E`` (``--entries-per-stream``, KV-sized entries: 32 x 32 MiB is the
issue-32 shape): each kvbench stream writes (reads) its ``E`` entries one after
the other; with ``--pipeline on`` (the default) a stream keeps one entry's
write pending (``write_pipelined``: its last commands, fsync and close still
running) while it starts the next, as a KV writer keeps its queue full across
entries (issue 32 §1), and with ``off`` each is durable (fsync) before the
next starts; every entry is durable before the stream's time ends.  fio ``nrfiles=E``,
``filesize`` = the entry size, ``file_service_type=sequential`` (one file after
the other, as a stream of entries) and, for writes, ``openfiles=1
fsync_on_close=1``: every file fsynced at its close, before the next is
opened, which is the durability each kvbench entry has when its ``write``
returns (fio's default, ``end_fsync`` with every file open, promises
durability only at the end of the job).  With ``E=1`` the job is the one-file
job above.

Bandwidth is bytes moved over the longest stream's time (open to close, fsync
included), as fio's group bandwidth is ``io_bytes`` over the longest job's
``runtime``; neither counts the skew between the streams' starts.

CPU cost is CPU time (user + system) per GiB moved, of the whole process on
both sides: ``RUSAGE_SELF`` around kvbench's phase (every thread, the kernel's
io-wq workers of its rings included), ``RUSAGE_CHILDREN`` around fio less
fio's start-up and tear-down (the same job moving one transfer, median of
three, per configuration).  fio's own per-job ``usr_cpu``/``sys_cpu`` come from
``getrusage(RUSAGE_THREAD)`` of the job thread alone, so they leave out the
io-wq workers that do io_uring's buffered copies; they are kept in the JSON as
``self_cpu_per_gib``.  The host share is kvbench's L4 host time over its
per-operation total.

    .venv/bin/python bench/nvme_vs_fio.py --dir /mnt/nvme/kvbench-bench --entry-size 256MiB
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin and fio: pip install -e plugins/kvbench_nvme; apt-get install fio",
     modules=("kvbench_nvme",), programs=("fio",))

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

from kvbench_core.contracts.backend import DISCARD, BackendContext, IOTiming, PendingWrite
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.units import format_bytes, parse_size
from kvbench_core.filetiers.fsinfo import block_device_of, describe_location

GIB = float(1 << 30)
ENGINES = ("psync", "io_uring")


@dataclass
class Sample:
    """One phase of one tool: bandwidth, CPU seconds per GiB, the device's requests, kvbench's L4 shares."""

    bandwidth: float  # bytes per second
    cpu_per_gib: float
    self_cpu_per_gib: float | None = None  # fio's own figure: the job thread only (RUSAGE_THREAD)
    device_requests: int | None = None  # block-layer requests completed on the device during the phase
    device_bytes: int | None = None
    host_share: float | None = None
    device_share: float | None = None
    switches_per_gib: float | None = None  # voluntary context switches per GiB, the whole process


@dataclass
class Cell:
    """All samples of one (mode, queue depth, op): one fio job and the kvbench engines compared with it."""

    mode: str
    queue_depth: int
    op: str
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def median(self, tool: str, attribute: str) -> float:
        return statistics.median(getattr(sample, attribute) for sample in self.samples[tool])


def fio_engine(queue_depth: int, kvbench_engine: str) -> str:
    """The fio job a kvbench engine is compared with at this depth (module doc)."""
    return "psync" if queue_depth == 1 and kvbench_engine == "psync" else "io_uring"


def tools(mode: str, queue_depth: int) -> list[str]:
    """The tools run in one (mode, queue depth) cell."""
    engines = [engine for engine in ENGINES if not (engine == "psync" and mode == "buffered" and queue_depth > 1)]
    fio_jobs = sorted({fio_engine(queue_depth, engine) for engine in engines})
    return [f"fio {job}" for job in fio_jobs] + [f"kvbench {engine}" for engine in engines]


def voluntary_switches(who: int = resource.RUSAGE_SELF) -> int:
    """Voluntary context switches so far of this process (every thread) or of its waited-for children."""
    return resource.getrusage(who).ru_nvcsw


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """CPU seconds so far of this process (every thread) or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


#: fio options of a stream of entries (``--entries-per-stream``), left out of the fixed-cost job
STREAM_OPTIONS = ("--nrfiles=", "--filesize=", "--file_service_type=", "--openfiles=", "--fsync_on_close=")
#: fio's fixed CPU cost per (command without size) : start-up, file set-up, tear-down
_FIO_FIXED: dict[tuple[str, ...], float] = {}


def fio_fixed_cpu(command: list[str], directory: str, transfer: int) -> float:
    """CPU seconds fio spends around the I/O: the same job moving one transfer, median of three.  A read
    reads the first transfer of the files just read; a write writes fresh files in a scratch directory
    beside ``directory`` (so the files the next read job reads stay whole)."""
    key = tuple(part for part in command if not part.startswith("--size="))
    if key not in _FIO_FIXED:
        writes = "--rw=write" in command
        scratch = f"{directory}-fixed" if writes else directory
        small = [f"--size={transfer}" if part.startswith("--size=") else
                 f"--directory={scratch}" if part.startswith("--directory=") else part for part in command
                 if not part.startswith(STREAM_OPTIONS)]  # the fixed cost of a one-file job
        costs = []
        for _ in range(3):
            if writes:
                os.makedirs(scratch)
            before = cpu_seconds(resource.RUSAGE_CHILDREN)
            subprocess.run(small, capture_output=True, check=True)
            costs.append(cpu_seconds(resource.RUSAGE_CHILDREN) - before)
            if writes:
                shutil.rmtree(scratch)
        _FIO_FIXED[key] = statistics.median(costs)
    return _FIO_FIXED[key]


class DeviceRequests:
    """Completed requests and bytes of the block device under a directory (``/proc/diskstats``)."""

    def __init__(self, directory: str) -> None:
        device = block_device_of(directory)
        self.major_minor = tuple(int(part) for part in device.major_minor.split(":")) if device else None

    def snapshot(self) -> dict[str, tuple[int, int]] | None:
        """``{"read": (requests, bytes), "write": (requests, bytes)}`` so far."""
        if self.major_minor is None:
            return None
        with open("/proc/diskstats") as lines:
            for line in lines:
                fields = line.split()
                if tuple(int(part) for part in fields[:2]) == self.major_minor:
                    return {"read": (int(fields[3]), int(fields[5]) * 512),
                            "write": (int(fields[7]), int(fields[9]) * 512)}
        return None

    @staticmethod
    def delta(before: dict[str, tuple[int, int]] | None, after: dict[str, tuple[int, int]] | None,
              op: str) -> tuple[int | None, int | None]:
        if before is None or after is None:
            return None, None
        return after[op][0] - before[op][0], after[op][1] - before[op][1]


def fio_command(directory: str, op: str, mode: str, args: argparse.Namespace, queue_depth: int,
                engine: str) -> list[str]:
    entries = args.entries_per_stream
    command = [
        "fio", "--refill_buffers=1", "--randrepeat=0", "--name=kv", f"--directory={directory}",
        f"--size={args.entry_bytes * entries}", f"--bs={args.transfer_bytes}",
        f"--numjobs={args.concurrency}", "--group_reporting", "--output-format=json", "--fallocate=none",
        f"--rw={op}", f"--direct={int(mode == 'direct')}", f"--ioengine={engine}", f"--iodepth={queue_depth}",
    ]
    if entries > 1:  # a stream of entries, each durable before the next (module doc)
        command += [f"--nrfiles={entries}", f"--filesize={args.entry_bytes}", "--file_service_type=sequential"]
        command += ["--openfiles=1", "--fsync_on_close=1"] if op == "write" else ["--invalidate=1"]
    else:
        command.append("--end_fsync=1" if op == "write" else "--invalidate=1")
    if args.fio_hugetlbfs:
        command.append(f"--mem=mmaphuge:{os.path.join(args.fio_hugetlbfs, 'kvbench-fio-buffers')}")
    return command


def run_fio(directory: str, op: str, mode: str, args: argparse.Namespace, queue_depth: int, engine: str,
            device: DeviceRequests) -> Sample:
    if op == "write":
        for name in os.listdir(directory):  # fresh files, as kvbench's entries are
            os.unlink(os.path.join(directory, name))
    command = fio_command(directory, op, mode, args, queue_depth, engine)
    before, cpu_before = device.snapshot(), cpu_seconds(resource.RUSAGE_CHILDREN)
    switches = voluntary_switches(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_before
    switches = voluntary_switches(resource.RUSAGE_CHILDREN) - switches
    requests, nbytes = device.delta(before, device.snapshot(), op)
    job = json.loads(done.stdout[done.stdout.index("{"):])["jobs"][0]  # group_reporting: all jobs summed
    own = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000  # job_runtime: summed over jobs
    gib = job[op]["io_bytes"] / GIB
    fixed = fio_fixed_cpu(command, directory, args.transfer_bytes)
    return Sample(bandwidth=job[op]["bw_bytes"], cpu_per_gib=max(cpu - fixed, 0.0) / gib,
                  self_cpu_per_gib=own / gib, device_requests=requests, device_bytes=nbytes,
                  switches_per_gib=switches / gib)


def write_stream(backend: NVMeBackend, keys: list[str], pool: NoisePool, size: int,
                 pipelined: bool) -> list[IOTiming]:
    """Write ``keys`` one after the other: each durable before the next starts, or (``pipelined``) with
    one write pending while the next starts; returns when every entry is durable."""
    if not pipelined:
        return [backend.write(key, pool.payload(key, size)) for key in keys]
    timings: list[IOTiming] = []
    pending: PendingWrite | None = None
    for key in keys:
        started = backend.write_pipelined(key, pool.payload(key, size))
        if pending is not None:
            timings.append(pending.result())
        pending = started
    if pending is not None:
        timings.append(pending.result())
    return timings


def run_kvbench(backend: NVMeBackend, workers: ThreadPoolExecutor, pool: NoisePool, op: str,
                args: argparse.Namespace, repeat: int, device: DeviceRequests) -> Sample:
    barrier = threading.Barrier(args.concurrency)
    streams = [[f"r{repeat}-s{index}-entry{entry}" for entry in range(args.entries_per_stream)]
               for index in range(args.concurrency)]  # new keys: new data every repeat

    def stream(keys: list[str]) -> tuple[float, float, list[IOTiming]]:
        barrier.wait()
        start = time.perf_counter()
        if op == "write":
            timings = write_stream(backend, keys, pool, args.entry_bytes, args.pipeline == "on")
        else:
            timings = [backend.read(key, args.entry_bytes, DISCARD) for key in keys]
        return start, time.perf_counter(), timings

    before, cpu_before, switches = device.snapshot(), cpu_seconds(), voluntary_switches()
    results = list(workers.map(stream, streams))
    cpu, switches = cpu_seconds() - cpu_before, voluntary_switches() - switches
    requests, nbytes = device.delta(before, device.snapshot(), op)
    if op == "read":
        for keys in streams:  # the next repeat writes fresh files (untimed)
            for key in keys:
                backend.delete(key)
    # fio's group bandwidth is io_bytes / the longest job's runtime (not first start to last end): same here
    wall = max(end - start for start, end, _ in results)
    timings = [timing for _, _, stream_timings in results for timing in stream_timings]
    moved = sum(timing.nbytes for timing in timings)
    total = sum(timing.total for timing in timings)
    return Sample(bandwidth=moved / wall, cpu_per_gib=cpu / (moved / GIB), device_requests=requests,
                  device_bytes=nbytes, host_share=sum(timing.host for timing in timings) / total,
                  device_share=sum(timing.device for timing in timings) / total,
                  switches_per_gib=switches / (moved / GIB))


def compare(mode: str, queue_depth: int, args: argparse.Namespace, pool: NoisePool) -> list[Cell]:
    cell_tools = tools(mode, queue_depth)
    device = DeviceRequests(args.dir)
    fio_dirs = {tool: os.path.join(args.dir, tool.replace(" ", "-")) for tool in cell_tools if tool.startswith("fio")}
    for directory in fio_dirs.values():
        os.makedirs(directory)  # ours alone: its files are unlinked before every fio write
    backends = {}
    for tool in cell_tools:
        if tool.startswith("kvbench"):
            engine = tool.split()[1]
            options = {"path": os.path.join(args.dir, engine), "direct": mode == "direct", "fsync": True,
                       "drop_cache": True, "queue_depth": queue_depth, "transfer_size": args.transfer_bytes,
                       "engine": engine}
            backends[tool] = NVMeBackend(options, BackendContext(tier_name="bench", run_id="bench",
                                                                 concurrency=args.concurrency))
    cells = {op: Cell(mode, queue_depth, op, {tool: [] for tool in cell_tools}) for op in ("write", "read")}
    try:
        for backend in backends.values():
            backend.open()
        with ThreadPoolExecutor(args.concurrency) as workers:
            for repeat in range(args.repeats):
                shift = repeat % len(cell_tools)
                order = cell_tools[shift:] + cell_tools[:shift]  # nobody always goes first
                for op in ("write", "read"):
                    for tool in order:
                        if tool in backends:
                            sample = run_kvbench(backends[tool], workers, pool, op, args, repeat, device)
                        else:
                            sample = run_fio(fio_dirs[tool], op, mode, args, queue_depth, tool.split()[1], device)
                        cells[op].samples[tool].append(sample)
                        print(f"  {mode:8} qd={queue_depth:<3} {op:5} {tool:16} "
                              f"{sample.bandwidth / 2**20:9.1f} MiB/s", flush=True)
    finally:
        for backend in backends.values():
            backend.close()
        for directory in fio_dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    return list(cells.values())


def machine(directory: str) -> dict[str, Any]:
    cpu_model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    return {"kernel": platform.release(), "cpu": cpu_model, "cpus": os.cpu_count(), "fio": fio_version,
            "python": platform.python_version(), "load_average": os.getloadavg(), **describe_location(directory)}


def rows(cells: list[Cell]) -> list[dict[str, Any]]:
    """One row per kvbench engine per cell, against the fio job it is compared with."""
    out = []
    for cell in cells:
        for tool in cell.samples:
            if not tool.startswith("kvbench"):
                continue
            fio = f"fio {fio_engine(cell.queue_depth, tool.split()[1])}"
            requests = cell.median(tool, "device_requests") if cell.samples[tool][0].device_requests is not None \
                else None
            out.append({
                "mode": cell.mode, "queue_depth": cell.queue_depth, "op": cell.op, "kvbench": tool, "fio": fio,
                "fio_mib_s": cell.median(fio, "bandwidth") / 2**20,
                "kvbench_mib_s": cell.median(tool, "bandwidth") / 2**20,
                "ratio": statistics.median(k.bandwidth / f.bandwidth for k, f in
                                           zip(cell.samples[tool], cell.samples[fio], strict=True)),
                "ratio_of_medians": cell.median(tool, "bandwidth") / cell.median(fio, "bandwidth"),
                "fio_cpu_s_per_gib": cell.median(fio, "cpu_per_gib"),
                "fio_self_cpu_s_per_gib": cell.median(fio, "self_cpu_per_gib"),
                "kvbench_cpu_s_per_gib": cell.median(tool, "cpu_per_gib"),
                "fio_switches_per_gib": cell.median(fio, "switches_per_gib"),
                "kvbench_switches_per_gib": cell.median(tool, "switches_per_gib"),
                "fio_device_requests": cell.median(fio, "device_requests") if requests is not None else None,
                "kvbench_device_requests": requests,
                "host_share": cell.median(tool, "host_share"), "device_share": cell.median(tool, "device_share"),
            })
    return out


def table(summary: list[dict[str, Any]]) -> str:
    """Medians: MiB/s, kvbench/fio (median of the paired ratios), CPU s/GiB, device requests, L4 shares."""
    lines = [f"{'mode':9}{'qd':>3} {'op':6}{'kvbench':17}{'vs':13}{'fio':>8}{'kvbench':>9}{'ratio':>7}"
             f"{'CPU fio':>9}{'CPU kv':>8}{'req fio':>9}{'req kv':>8}{'host %':>8}{'dev %':>7}"]
    for row in summary:
        requests = "".join(f"{row[key]:>{width}.0f}" if row[key] is not None else f"{'-':>{width}}"
                           for key, width in (("fio_device_requests", 9), ("kvbench_device_requests", 8)))
        lines.append(
            f"{row['mode']:9}{row['queue_depth']:>3} {row['op']:6}{row['kvbench']:17}{row['fio']:13}"
            f"{row['fio_mib_s']:>8.1f}{row['kvbench_mib_s']:>9.1f}{row['ratio']:>7.2f}"
            f"{row['fio_cpu_s_per_gib']:>9.2f}{row['kvbench_cpu_s_per_gib']:>8.2f}{requests}"
            f"{100 * row['host_share']:>8.1f}{100 * row['device_share']:>7.1f}")
    return "\n".join(lines)


def markdown(summary: list[dict[str, Any]]) -> str:
    """The table for docs/PERFORMANCE.md, from the same medians."""
    lines = ["| mode | qd | op | kvbench | vs fio | fio MiB/s | kvbench MiB/s | kv / fio paired | kv / fio medians | "
             "CPU s/GiB fio | "
             "CPU s/GiB kvbench | requests fio | requests kvbench | kv host % |",
             "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in summary:
        requests = " | ".join(f"{row[key]:.0f}" if row[key] is not None else "–"
                              for key in ("fio_device_requests", "kvbench_device_requests"))
        lines.append(f"| {row['mode']} | {row['queue_depth']} | {row['op']} | {row['kvbench'].split()[1]} | "
                     f"{row['fio'].split()[1]} | {row['fio_mib_s']:.0f} | {row['kvbench_mib_s']:.0f} | "
                     f"{row['ratio']:.2f} | {row['ratio_of_medians']:.2f} | "
                     f"{row['fio_cpu_s_per_gib']:.2f} | {row['kvbench_cpu_s_per_gib']:.2f} | "
                     f"{requests} | {100 * row['host_share']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="kvcache/nvme-vs-fio", help="scratch directory on the filesystem under test")
    parser.add_argument("--entry-size", default="256MiB",
                        help="bytes per entry: llama3.1-8b is 131072 B/token, so 256MiB = 2048 tokens")
    parser.add_argument("--transfer-size", default="1MiB", help="bytes per pread/pwrite (fio bs)")
    parser.add_argument("--concurrency", type=int, default=2, help="streams, one entry in flight each (fio numjobs)")
    parser.add_argument("--entries-per-stream", type=int, default=1,
                        help="entries each stream moves one after the other (fio nrfiles, one file at a time)")
    parser.add_argument("--pipeline", choices=("on", "off"), default="on",
                        help="kvbench streams keep one write pending while the next entry starts (on), "
                             "or make each entry durable first (off)")
    parser.add_argument("--queue-depths", default="1,4", help="comma-separated queue depths per entry")
    parser.add_argument("--modes", default="buffered,direct", help="buffered and/or direct")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fio-hugetlbfs", metavar="DIR",
                        help="a mounted hugetlbfs: fio's buffers in huge pages, contiguous like kvbench's")
    parser.add_argument("--json", help="also write the samples and machine description here")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = parser.parse_args()
    if shutil.which("fio") is None:
        parser.error("fio is not installed (apt-get install fio)")
    args.entry_bytes = parse_size(args.entry_size)  # fio gets plain bytes: it reads "1MiB" as 10^6
    args.transfer_bytes = parse_size(args.transfer_size)
    os.makedirs(args.dir, exist_ok=True)
    about = machine(args.dir)
    print(json.dumps(about, indent=1))
    print(f"entry {format_bytes(args.entry_bytes)} x {args.entries_per_stream} per stream, "
          f"transfer {args.transfer_size}, concurrency {args.concurrency}, pipeline {args.pipeline}, "
          f"{args.repeats} repeats (median)")
    pool = NoisePool(seed=1, max_piece=max(args.transfer_bytes, 1 << 20))
    cells: list[Cell] = []
    for mode in args.modes.split(","):
        for queue_depth in (int(depth) for depth in args.queue_depths.split(",")):
            cells += compare(mode, queue_depth, args, pool)
    summary = rows(cells)
    about["load_average_after"] = os.getloadavg()
    print(table(summary))
    if args.markdown:
        print(markdown(summary))
    print(f"load average before {about['load_average']}, after {about['load_average_after']}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": about, "args": vars(args), "summary": summary,
                       "cells": [asdict(cell) for cell in cells]}, out, indent=1)
    if not os.listdir(args.dir):
        os.rmdir(args.dir)


if __name__ == "__main__":
    main()
