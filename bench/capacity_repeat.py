"""Does a repeat of ``kvbench capacity`` land inside the first search's 95 % interval (issue #33 §1)?

Needs: the nvme plugin: pip install -e plugins/kvbench_nvme.

    .venv/bin/python bench/capacity_repeat.py [--spec specs/capacity-search.yaml] [--budget 3m] [--repeats 2]
                                              [--work DIR]

Runs the search ``--repeats`` times in a row on the spec (its directory tier in a fresh subdirectory of
DIR each time, so no search reads another's files), and prints one row per search: the answer, its
interval, the drift its re-measured bracket ends showed, and whether it lands inside every earlier
search's interval; then how many of the pairs (earlier, later) landed inside.  Every search's JSON answer
goes to ``DIR/repeats.json``.  The load average before each search is recorded: on a shared machine it
is what moves the answer.
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin: pip install -e plugins/kvbench_nvme", modules=("kvbench_nvme",))

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KVBENCH = str(Path(sys.executable).with_name("kvbench"))


def search(spec: str, work: Path, index: int) -> dict[str, Any]:
    """One ``kvbench capacity --json`` of the spec, its directory tier and results under ``work/<index>``;
    a search already recorded there is reused (a re-run after one failed keeps the others)."""
    where = work / str(index)
    recorded = where / "search.json"
    if recorded.exists():
        return json.loads(recorded.read_text())
    load = os.getloadavg()[0]
    began = time.perf_counter()
    done = subprocess.run([KVBENCH, "capacity", spec, "--budget", ARGS.budget, "--json", "-q",
                           "--output", str(where / "results"), "--set", f"cache.tiers.1.options.path={where / 'kv'}",
                           "--set", "cache.tiers.1.options.create=true"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"capacity_repeat: search {index} failed (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:]}")
    answer = json.loads(done.stdout)  # drift and repeated_loads included: the result's own record
    row = {"index": index, "load_avg": round(load, 1), "wall_s": round(time.perf_counter() - began, 1),
           "answer": answer}
    recorded.write_text(json.dumps(row))
    return row


def rows(searches: list[dict[str, Any]]) -> tuple[list[str], int, int]:
    """The table, and (pairs inside, pairs) over every earlier-later pair."""
    lines = ["| search | load avg | answer | 95 % CI | drift | re-measured loads | steps | inside earlier CIs |",
             "|---|---|---|---|---|---|---|---|"]
    inside = pairs = 0
    for later, row in enumerate(searches):
        answer = row["answer"]
        value = answer.get("max_users_within_sla")
        landed = []
        for earlier in searches[:later]:
            low, high = earlier["answer"].get("ci95") or (None, None)
            hit = value is not None and low is not None and low <= value <= high
            inside, pairs = inside + hit, pairs + 1
            landed.append(f"{earlier['index']}: {'yes' if hit else 'no'}")
        low, high = answer.get("ci95") or (None, None)
        lines.append(f"| {row['index']} | {row['load_avg']} | {value} | {low}-{high} | {answer.get('drift')} | "
                     f"{answer.get('repeated_loads')} | {len(answer.get('steps') or [])} | "
                     f"{', '.join(landed) or '-'} |")
    return lines, inside, pairs


def main() -> int:
    work = Path(ARGS.work or tempfile.mkdtemp(prefix="kvbench-capacity-repeat-"))
    work.mkdir(parents=True, exist_ok=True)
    searches = [search(ARGS.spec, work, index) for index in range(1, ARGS.repeats + 1)]
    lines, inside, pairs = rows(searches)
    (work / "repeats.json").write_text(json.dumps({"spec": ARGS.spec, "budget": ARGS.budget, "cpus": os.cpu_count(),
                                                  "searches": searches}, indent=1))
    print("\n".join(lines))
    print(f"\nrepeats inside an earlier search's interval: {inside} of {pairs}; figures: {work / 'repeats.json'}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="specs/capacity-search.yaml", help="the capacity spec (a directory "
                        "tier second in cache.tiers)")
    parser.add_argument("--budget", default="3m", help="each search's budget (default 3m)")
    parser.add_argument("--repeats", type=int, default=2, help="searches in a row (default 2)")
    parser.add_argument("--work", help="where results, tier directories and repeats.json go (default: a temp dir)")
    ARGS = parser.parse_args()
    sys.exit(main())
