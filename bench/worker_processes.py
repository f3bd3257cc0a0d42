"""Read bandwidth of one run over 1 and 2 worker processes (``workers: {processes: N}``, issue 32 §3).

Needs: the nvme plugin (the directory tier read): pip install -e plugins/kvbench_nvme.

A read-heavy run on one directory tier at ``--dir`` (O_DIRECT io_uring at depth 16, 1 MiB commands):
closed-loop users of llama3.2-1b whose requests write a 32 MiB entry once and read it back 8 times
(generate 256 tokens, decode_batch 32), no think time, no DRAM tier in front.  The same spec runs with
``workers.processes`` 1 and 2 in turn, ``--repeats`` times each, every run a fresh ``kvbench run``
process; per run it prints the merged result's read bandwidth of the tier, its reads' CPU seconds per GiB
(all processes), the status and the load average.  Point ``--dir`` at a RAM-backed filesystem so the
device is not the limit: ``PROCESSES=1 sudo -E bash bench/ceiling.sh`` makes the RAM block device and runs
this script on it.  Record the medians in docs/PERFORMANCE.md.

    .venv/bin/python bench/worker_processes.py --dir /mnt/fast/kv --repeats 3 --duration 20
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin (the directory tier read): pip install -e plugins/kvbench_nvme", modules=("kvbench_nvme",))

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

GiB = 1 << 30


def spec(directory: Path, out: Path, processes: int, duration: int) -> dict[str, Any]:
    """The read-heavy run, ``processes`` worker processes of it."""
    return {
        "version": 1, "name": f"processes{processes}", "seed": 7, "duration": f"{duration}s", "warmup": "3s",
        "model": {"name": "llama3.2-1b", "dtype": "bf16"},
        "workers": {"processes": processes},
        "workload": {"users": 4, "max_inflight": 4, "generation": "none", "decode_batch": 32, "options": {
            "profiles": {"reader": {"context": [1024, 1024], "generate": [256, 256], "think_s": [0, 0]}},
            "profile_mix": {"reader": 1}, "prefix_caching": {"enabled": False},
            "multi_turn": {"enabled": False}}},
        "cache": {"tiers": [{"name": "nvme", "backend": "nvme", "capacity": "2GiB", "options": {
            "path": str(directory), "create": True, "direct": True, "engine": "io_uring", "queue_depth": 16,
            "transfer_size": "1MiB", "fsync": False}}]},
        "output": {"directory": str(out), "progress": "off"},
    }


def run_once(directory: Path, work: Path, processes: int, duration: int) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(dir=work))
    path = out / "spec.yaml"
    path.write_text(yaml.safe_dump(spec(directory, out, processes, duration)))
    load = os.getloadavg()[0]
    done = subprocess.run([sys.executable, "-m", "kvbench_core.cli", "run", str(path), "--quiet", "--exit-zero"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (result_file,) = out.glob(f"processes{processes}-*.json")
    result = json.loads(result_file.read_text())
    metrics = result["metrics"]
    read = metrics["tiers"]["nvme"]["read"]
    return {"processes": processes, "read_MiB_s": round(read["bandwidth_bytes_per_s"] / (1 << 20)),
            "read_GiB": round(read["bytes"] / GiB, 2),
            "cpu_s_per_GiB_moved": round(metrics["cpu"]["process_cpu_s"]
                                         / max(1e-9, (read["bytes"] + metrics["tiers"]["nvme"]["write"]["bytes"])
                                               / GiB), 3),
            "status": result["run"]["status"], "load_1min": round(load, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the tier's directory (created, then removed)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", type=int, default=20, help="measured seconds per run")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for repeat in range(args.repeats):
            for processes in ((1, 2) if repeat % 2 == 0 else (2, 1)):  # interleaved, the order alternating
                row = run_once(args.dir, Path(work), processes, args.duration)
                rows.append(row)
                print(json.dumps(row), flush=True)
    for processes in (1, 2):
        figures = [row["read_MiB_s"] for row in rows if row["processes"] == processes]
        print(f"processes {processes}: read MiB/s median {statistics.median(figures)} "
              f"(range {min(figures)}-{max(figures)}, {len(figures)} runs)")


if __name__ == "__main__":
    main()
