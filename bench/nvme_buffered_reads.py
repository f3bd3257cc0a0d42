"""Buffered reads of one and the same file by fio's psync job and by kvbench's nvme tier, alternately.

Needs: the nvme plugin and fio: pip install -e plugins/kvbench_nvme; apt-get install fio.

``bench/nvme_vs_fio.py`` gives each tool its own files.  When kvbench's buffered
reads came out 1.4–2.7× fio's there, the question was whether the tools read
differently or their files were in different places (the host's cache of a
virtual disk, block placement).  Here the file is the same: kvbench writes one
entry (fsync), then fio (``ioengine=psync``, ``invalidate=1``, its default
``fadvise_hint``) and kvbench (``drop_cache: true``) take turns reading it,
each after the guest page cache of the file is dropped.  Every read records
its bandwidth and the block device's completed read requests and bytes
(``/proc/diskstats`` deltas), hence the mean request size, so readahead's work
is visible.  The device's ``read_ahead_kb`` and ``max_sectors_kb`` are printed.

    .venv/bin/python bench/nvme_buffered_reads.py --dir /mnt/nvme/kvbench-reads --size 256MiB --turns 6
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin and fio: pip install -e plugins/kvbench_nvme; apt-get install fio",
     modules=("kvbench_nvme",), programs=("fio",))

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvbench_nvme.backend import NVMeBackend

from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.units import parse_size
from kvbench_core.filetiers.fsinfo import block_device_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nvme_vs_fio import DeviceRequests  # the sibling bench script's diskstats reader


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fio_read(path: str, size: int, transfer: int) -> tuple[float, float]:
    """Bandwidth and CPU seconds of one fio read job (its own accounting, start-up excluded)."""
    command = ["fio", "--name=kv", f"--filename={path}", f"--size={size}", f"--bs={transfer}", "--rw=read",
               "--ioengine=psync", "--invalidate=1", "--output-format=json"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    job = json.loads(done.stdout[done.stdout.index("{"):])["jobs"][0]
    return job["read"]["bw_bytes"], (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="kvcache/nvme-buffered-reads")
    parser.add_argument("--size", default="256MiB")
    parser.add_argument("--transfer-size", default="1MiB")
    parser.add_argument("--turns", type=int, default=6, help="reads per tool, alternating")
    args = parser.parse_args()
    size, transfer = parse_size(args.size), parse_size(args.transfer_size)
    backend = NVMeBackend({"path": args.dir, "fsync": True, "drop_cache": True, "transfer_size": transfer},
                          BackendContext(tier_name="reads", run_id="reads"))
    backend.open()
    try:
        backend.write("entry", NoisePool(seed=1, max_piece=max(transfer, 1 << 20)).payload("entry", size))
        path = backend.path_of("entry")
        device = DeviceRequests(path)
        disk = block_device_of(path)
        if disk is not None:
            queue = Path("/sys/block") / disk.disk / "queue"
            print({name: (queue / name).read_text().strip() for name in ("read_ahead_kb", "max_sectors_kb")})
        samples: dict[str, list[tuple[float, int | None, int | None, float]]] = {"fio psync": [], "kvbench psync": []}
        for turn in range(args.turns):
            for tool in (list(samples) if turn % 2 == 0 else list(samples)[::-1]):
                before = device.snapshot()
                if tool == "fio psync":
                    bandwidth, cpu = fio_read(path, size, transfer)
                else:
                    start, cpu_before = time.perf_counter(), cpu_seconds()
                    backend.read("entry", size, DISCARD)
                    bandwidth, cpu = size / (time.perf_counter() - start), cpu_seconds() - cpu_before
                requests, nbytes = device.delta(before, device.snapshot(), "read")
                samples[tool].append((bandwidth, requests, nbytes, cpu / (size / 2**30)))
                mean = f"{nbytes / requests / 1024:7.0f} KiB/request" if requests else ""
                print(f"turn {turn} {tool:14} {bandwidth / 2**20:8.1f} MiB/s  {samples[tool][-1][3]:.2f} CPU s/GiB  "
                      f"{requests} requests, "
                      f"{(nbytes or 0) / 2**20:.0f} MiB {mean}", flush=True)
        for tool, rows in samples.items():
            print(f"{tool:14} median {statistics.median(row[0] for row in rows) / 2**20:8.1f} MiB/s, "
                  f"median requests {statistics.median(row[1] or 0 for row in rows):.0f}, "
                  f"median CPU {statistics.median(row[3] for row in rows):.2f} s/GiB")
        print(f"load average {os.getloadavg()}")
    finally:
        backend.close()  # removes the entry, and the directory if it made it


if __name__ == "__main__":
    main()
