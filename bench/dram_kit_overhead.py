"""What the backend kit costs the DRAM tier: this tree's ``cpu`` tier against a git revision's, in one run.

Needs: kvbench-core alone (pip install -e .) and git.

The baseline's ``kvbench_core/builtins/memory.py`` is read from git (``--baseline``, e.g. the commit before
the tier moved onto ``PieceBackend``: ``83add1a~1``) and loaded beside this tree's; both tiers are
pre-faulted to the same size and move the same entries (write: fill from the payload's noise pool into the
arena; read: restore into the ring, discarding sink).  The four measures run once per repeat in an order
that rotates, so drift in the machine's load hits both alike; the figures to quote are the paired ratios
(this tree over the baseline, per repeat: median and range), of wall time and of the process's CPU time.

    .venv/bin/python bench/dram_kit_overhead.py --baseline 83add1a~1 --entry-mib 64 --entries 2 --repeats 21
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("kvbench-core alone (pip install -e .) and git", modules=("kvbench_core",), programs=("git",))

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dram_vs_memcpy import tier_read_seconds, tier_write_seconds

from kvbench_core.builtins.memory import BLOCK, CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool


def baseline_class(revision: str) -> Any:
    """``CPUMemoryBackend`` as ``revision`` wrote it, loaded as a module of its own."""
    text = subprocess.run(["git", "show", f"{revision}:kvbench_core/builtins/memory.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_memory.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("baseline_memory", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_memory"] = module
    spec.loader.exec_module(module)
    return module.CPUMemoryBackend


def timed(call: Any) -> tuple[float, float]:
    """Wall seconds (what the call returns) and process CPU seconds of one measure."""
    cpu = time.process_time()
    wall = call()
    return wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git revision whose cpu tier to compare against")
    parser.add_argument("--entry-mib", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    size = args.entry_mib << 20
    pool = NoisePool(seed=1, pool_bytes=32 << 20, max_piece=BLOCK)
    keys = [f"entry{i}" for i in range(args.entries)]
    measures = {}
    for version, cls in (("baseline", baseline_class(args.baseline)), ("tree", CPUMemoryBackend)):
        backend = cls({}, BackendContext(tier_name="dram", run_id="bench"))
        backend.open()
        backend.reserve(size * args.entries)
        tier_write_seconds(backend, pool, keys, size)
        measures[f"write_{version}"] = lambda b=backend: tier_write_seconds(b, pool, keys, size)
        measures[f"read_{version}"] = lambda b=backend: tier_read_seconds(b, keys, size)
    for measure in measures.values():  # warm
        measure()
    wall: dict[str, list[float]] = {name: [] for name in measures}
    cpu: dict[str, list[float]] = {name: [] for name in measures}
    names = list(measures)
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            seconds, cpu_seconds = timed(measures[name])
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)

    def paired(runs: dict[str, list[float]], op: str) -> dict[str, float]:
        """Tree over baseline in throughput (baseline seconds / tree seconds), per repeat: > 1 is faster."""
        ratios = [b / t for b, t in zip(runs[f"{op}_baseline"], runs[f"{op}_tree"], strict=True)]
        return {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                "max": round(max(ratios), 3)}

    moved = size * args.entries
    print(json.dumps({
        "baseline": args.baseline, "entry_mib": args.entry_mib, "entries": args.entries, "repeats": args.repeats,
        "gb_per_s": {name: round(moved / statistics.median(values) / 1e9, 3) for name, values in wall.items()},
        "tree_over_baseline": {op: {"wall": paired(wall, op), "cpu": paired(cpu, op)} for op in ("write", "read")},
        "load_average": os.getloadavg(),
    }, indent=2))


if __name__ == "__main__":
    main()
