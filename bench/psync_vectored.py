"""O_DIRECT reads at depth Q: one vectored ``preadv`` of Q pieces per call against Q threads with one each.

Needs: the nvme plugin (its huge-page buffers, as the psync engine uses them): pip install -e plugins/kvbench_nvme.

The question of issue 32 §2 before building fio's ``pvsync``-style engine into psync: does one thread
issuing ``os.preadv`` of Q transfer-size pieces (one syscall, the kernel splits it into the device's
requests) read as fast as Q threads with one ``preadv`` each (today's psync at depth Q), and at what
CPU?  Whole-process CPU (``RUSAGE_SELF``) and voluntary context switches around each read of the file,
the two ways interleaved with their order alternating; the file is written once with O_DIRECT and
read with O_DIRECT (no page cache).  Prints one line per read and the medians.

    .venv/bin/python bench/psync_vectored.py --dir /path/on/the/device --size-gib 1 --depth 16 --repeats 5
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin (its huge-page buffers, as the psync engine uses them): pip install -e plugins/kvbench_nvme",
     modules=("kvbench_nvme",))

import argparse
import os
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kvbench_nvme.buffers import Region

MiB = 1 << 20


def usage() -> tuple[float, int]:
    self = resource.getrusage(resource.RUSAGE_SELF)
    return self.ru_utime + self.ru_stime, self.ru_nvcsw


def write_file(path: str, size: int, piece: int) -> None:
    region = Region(piece)
    region.view[:] = os.urandom(piece)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        for offset in range(0, size, piece):
            os.pwritev(fd, [region.view], offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def vectored(path: str, size: int, piece: int, depth: int) -> Callable[[], None]:
    """One thread, one ``preadv`` of ``depth`` pieces per call."""
    views = [Region(piece).view for _ in range(depth)]

    def read() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            for offset in range(0, size, piece * depth):
                os.preadv(fd, views, offset)
        finally:
            os.close(fd)
    return read


def threaded(path: str, size: int, piece: int, depth: int) -> Callable[[], None]:
    """``depth`` threads, each with its own buffer and one ``preadv`` of one piece at a time."""
    pool, local = ThreadPoolExecutor(depth), threading.local()

    def read() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)

        def one(offset: int) -> None:
            if not hasattr(local, "view"):
                local.view = Region(piece).view
            os.preadv(fd, [local.view], offset)
        try:
            list(pool.map(one, range(0, size, piece)))
        finally:
            os.close(fd)
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="directory on the device under test")
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--transfer-mib", type=int, default=1)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    piece = args.transfer_mib * MiB
    size = int(args.size_gib * 2**30) // (piece * args.depth) * piece * args.depth
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        path = os.path.join(work, "data")
        write_file(path, size, piece)
        ways = {"vectored": vectored(path, size, piece, args.depth), "threads": threaded(path, size, piece, args.depth)}
        rows: dict[str, list[tuple[float, float, int]]] = {name: [] for name in ways}
        for repeat in range(args.repeats):
            for name in (list(ways) if repeat % 2 == 0 else list(ways)[::-1]):
                cpu0, switches0 = usage()
                start = time.perf_counter()
                ways[name]()
                seconds = time.perf_counter() - start
                cpu1, switches1 = usage()
                gib = size / 2**30
                rows[name].append((size / seconds / 1e6, (cpu1 - cpu0) / gib, round((switches1 - switches0) / gib)))
                print(f"{name:8s} {rows[name][-1][0]:6.0f} MB/s  cpu {rows[name][-1][1]:.3f} s/GiB  "
                      f"switches/GiB {rows[name][-1][2]}  load {os.getloadavg()[0]:.1f}", flush=True)
    for name, samples in rows.items():
        bandwidth, cpu, switches = zip(*samples, strict=True)
        print(f"{name:8s} median {statistics.median(bandwidth):.0f} MB/s ({min(bandwidth):.0f}-{max(bandwidth):.0f}), "
              f"cpu {statistics.median(cpu):.3f} s/GiB ({min(cpu):.3f}-{max(cpu):.3f}), "
              f"switches/GiB {statistics.median(switches):.0f}, depth {args.depth} x {args.transfer_mib} MiB")


if __name__ == "__main__":
    main()
