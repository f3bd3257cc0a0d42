"""Peak RSS of a run vs user count, on the seed's storage-baseline shape.

Needs: the nvme plugin (it runs specs/storage-baseline.yaml): pip install -e plugins/kvbench_nvme.

llama3.1-8b (128 KiB/token), coding profile (contexts up to 25K tokens ≈ 3 GiB entries), max_inflight 4,
one file tier.  Entries are streamed in transfer-size pieces, so peak RSS must stay far below one entry
and must not grow with the user count.  Prints one line per user count and a JSON summary; record the
numbers in docs/PERFORMANCE.md.

    .venv/bin/python bench/rss_scaling.py --dir /path/on/the/device --duration 20
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin (it runs specs/storage-baseline.yaml): pip install -e plugins/kvbench_nvme",
     modules=("kvbench_nvme",))

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run(users: int, directory: str, duration: int, out: Path) -> dict:
    kvbench = str(Path(sys.executable).with_name("kvbench"))
    overrides = [
        f"workload.users={users}", f"duration={duration}s", "warmup=0", "workload.max_inflight=4",
        "workload.options={profile_mix: {coding: 1}}", "model.name=llama3.1-8b",
        f"cache.tiers.0.options.path={directory}/rss-{users}", "cache.tiers.0.capacity=64GiB",
    ]
    args = [kvbench, "run", "specs/storage-baseline.yaml", "--quiet", "--output", str(out)]
    for override in overrides:
        args += ["--set", override]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    result = json.loads(max(out.glob("storage-baseline-*.json"), key=lambda p: p.stat().st_mtime).read_text())
    metrics = result["metrics"]
    return {"users": users, "peak_rss_mib": round(metrics["cpu"]["peak_rss_bytes"] / 2**20, 1),
            "requests": metrics["requests"]["completed"],
            "largest_entry_gib": round(max(result["workload"]["stats"]["input_length"]["max"] or 0, 0)
                                       * 131072 / 2**30, 2),
            "bytes_moved_gb": round(sum(t["read"]["bytes"] + t["write"]["bytes"]
                                        for t in metrics["tiers"].values()) / 1e9, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="directory on the device under test")
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--users", type=int, nargs="+", default=[20, 2000])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for users in args.users:
            row = run(users, args.dir, args.duration, Path(out))
            rows.append(row)
            print(f"users {row['users']:>5}: peak RSS {row['peak_rss_mib']:8.1f} MiB, "
                  f"{row['requests']} requests, largest entry {row['largest_entry_gib']} GiB, "
                  f"{row['bytes_moved_gb']} GB moved")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
