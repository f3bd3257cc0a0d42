"""Python's own cost per command in the io_uring engine's loop: this tree's engines against a git revision's.

Needs: the nvme plugin and git (the baseline is read from git): pip install -e plugins/kvbench_nvme.

Both versions of the ``kvbench_nvme`` package (the working tree's and ``--baseline``'s, read from git; its
``engines`` module names the engines, which live in several modules since the split) move
the same entries through buffered io_uring on a tmpfs file (``/dev/shm`` by default), where no device
time hides the loop: what each command costs is the engine's Python (planning, submitting, reaping,
logging) plus the kernel's memcpy.  The source fills nothing, so payload rendering is left out too.
Rounds alternate the two versions (which one goes first rotates), so drift on a shared machine hits
both alike; the medians of the per-command process CPU time and wall time, and their ratio
(this tree / baseline), are printed.  A ratio near 1.00 means a restructuring of the loop cost nothing.

    .venv/bin/python bench/uring_loop_overhead.py --baseline HEAD~1
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin and git (the baseline is read from git): pip install -e plugins/kvbench_nvme",
     modules=("kvbench_nvme",), programs=("git",))

import argparse
import importlib.abc
import importlib.util
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.filetiers.accounting import Phase

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "plugins/kvbench_nvme/kvbench_nvme"


class UnfilledSource:
    """A ``ByteSource`` that leaves the buffer as it is: the loop is measured, not payload rendering."""

    def __init__(self, size: int) -> None:
        self.size = size

    def fill(self, offset: int, out: memoryview) -> None:
        return None


class VersionFinder(importlib.abc.MetaPathFinder):
    """Resolves ``kvbench_nvme`` and its modules to one directory, ahead of the editable install's finder."""

    def __init__(self, package: Path) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname == "kvbench_nvme":
            return importlib.util.spec_from_file_location(fullname, self.package / "__init__.py",
                                                          submodule_search_locations=[str(self.package)])
        if fullname.startswith("kvbench_nvme."):
            return importlib.util.spec_from_file_location(fullname, self.package / f"{fullname[13:]}.py")
        return None


def load_engines(revision: str | None, workdir: Path) -> ModuleType:
    """``kvbench_nvme.engines`` of the working tree (``None``) or of a git revision, with that version's
    own sibling modules, as a copy of its own (the installed package is put back afterwards)."""
    if revision is None:
        package = REPO / PACKAGE
    else:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, PACKAGE],
                                 check=True, capture_output=True).stdout
        root = workdir / "baseline"
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        package = root / PACKAGE
    ours = [name for name in sys.modules if name.split(".")[0] == "kvbench_nvme"]
    saved = {name: sys.modules.pop(name) for name in ours}
    finder = VersionFinder(package)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module("kvbench_nvme.engines")
    finally:
        sys.meta_path.remove(finder)
        for name in [name for name in sys.modules if name.split(".")[0] == "kvbench_nvme"]:
            del sys.modules[name]  # the loaded classes keep their modules alive
        sys.modules.update(saved)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_round(engine: object, path: Path, size: int) -> tuple[float, float]:
    """CPU and wall seconds to write then read one entry through ``engine``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        cpu, wall = cpu_seconds(), time.perf_counter()
        engine.write(fd, "entry", UnfilledSource(size), size, Phase(), None)  # type: ignore[attr-defined]
        engine.read(fd, "entry", DISCARD, size, Phase(), None)  # type: ignore[attr-defined]
        return cpu_seconds() - cpu, time.perf_counter() - wall
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="HEAD", help="git revision whose engines are the baseline")
    parser.add_argument("--dir", default="/dev/shm", help="directory for the entry file (tmpfs: no device)")
    parser.add_argument("--entry-mib", type=int, default=16)
    parser.add_argument("--transfer-kib", type=int, default=4)  # small: Python, not memcpy, dominates
    parser.add_argument("--queue-depth", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    size, transfer = args.entry_mib << 20, args.transfer_kib << 10
    commands = 2 * -(-size // transfer)  # the write's and the read's
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory(dir=args.dir) as data:
        versions = {"tree": load_engines(None, Path(scratch)), "baseline": load_engines(args.baseline, Path(scratch))}
        engines = {}
        for label, module in versions.items():
            settings = module.EngineSettings(transfer_size=transfer, queue_depth=args.queue_depth, direct=False,
                                             concurrency=1, thread_name=f"bench-{label}")
            engines[label] = module.UringEngine(settings)
            engines[label].open()
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label in engines}
        try:
            for label, engine in engines.items():  # warm-up: rings made, file pages allocated
                one_round(engine, Path(data) / label, size)
            for round_index in range(args.rounds):
                order = list(engines) if round_index % 2 == 0 else list(reversed(engines))
                for label in order:
                    samples[label].append(one_round(engines[label], Path(data) / label, size))
        finally:
            for engine in engines.values():
                engine.close()
    cpu = {label: statistics.median(c for c, _ in rows) / commands * 1e6 for label, rows in samples.items()}
    wall = {label: statistics.median(w for _, w in rows) / commands * 1e6 for label, rows in samples.items()}
    print(f"{args.rounds} rounds, {commands} commands each ({args.entry_mib} MiB written and read in "
          f"{args.transfer_kib} KiB, queue_depth {args.queue_depth}, buffered, {args.dir}); "
          f"load {os.getloadavg()[0]:.2f}")
    for label in engines:
        print(f"  {label:8}  CPU {cpu[label]:6.2f} us/command   wall {wall[label]:6.2f} us/command")
    print(f"  tree/baseline: CPU {cpu['tree'] / cpu['baseline']:.3f}   wall {wall['tree'] / wall['baseline']:.3f}")


if __name__ == "__main__":
    main()
