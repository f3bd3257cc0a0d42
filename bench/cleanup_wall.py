"""Wall time of a 30 s quickstart run against its target (issue 32 §4): duration + warm-up + drain limit + 3 s.

Needs: the nvme plugin (specs/quickstart.yaml has a directory tier): pip install -e plugins/kvbench_nvme.

Runs ``kvbench run specs/quickstart.yaml --set duration=30s`` in a fresh process per repeat and times it
from the process's start to its exit (start-up, run, drain, cleanup, result, reports, the wait for the
entry files' deletion) and to the moment its result file appears, with each run's phases
(``run.phases_s``) and its summary's ``cleanup:`` line.
``--tree DIR`` runs another checkout's kvbench_core instead (``git archive COMMIT | tar -x -C DIR``), so
the before/after pairs interleave in one invocation: ``--tree /tmp/before --tree .`` (``.`` is this
tree).  Prints one line per run and a JSON list; record the medians in docs/PERFORMANCE.md.

    .venv/bin/python bench/cleanup_wall.py --tree /tmp/before --tree . --repeats 3
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the nvme plugin (specs/quickstart.yaml has a directory tier): pip install -e plugins/kvbench_nvme",
     modules=("kvbench_nvme",))

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION_S, WARMUP_S = 30, 5


def run_once(tree: Path, work: Path) -> dict:
    """One run of the quickstart from ``tree``'s kvbench_core, timed as a user's shell would time it."""
    out = Path(tempfile.mkdtemp(dir=work))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, "-m", "kvbench_core.cli", "run", str(ROOT / "specs" / "quickstart.yaml"), "--exit-zero",
            "--quiet", "--output", str(out), "--set", f"duration={DURATION_S}s", "--set", f"warmup={WARMUP_S}s",
            "--set", f"cache.tiers[1].options.path={out / 'kvcache'}"]
    start, result_at = time.perf_counter(), None
    with tempfile.TemporaryFile("w+") as stdout:
        process = subprocess.Popen(args, env=env, cwd=tree, stdout=stdout, stderr=subprocess.DEVNULL)  # -m: cwd 1st
        while process.poll() is None:  # when the result appears: before or after the entry files are deleted
            if result_at is None and any(out.glob("quickstart-*.json")):
                result_at = time.perf_counter() - start
            time.sleep(0.02)
        wall = time.perf_counter() - start
        stdout.seek(0)
        lines = stdout.read().splitlines()
    assert process.returncode == 0, lines
    (result_file,) = out.glob("quickstart-*.json")
    result = json.loads(result_file.read_text())
    run, drain_limit = result["run"], result["metrics"]["drain"]["limit_s"]
    assert not (out / "kvcache").exists(), "the run left its tier directory behind"
    return {"tree": str(tree), "wall_s": round(wall, 2), "result_at_s": round(result_at or wall, 2),
            "phases_s": run["phases_s"],
            "target_s": DURATION_S + WARMUP_S + drain_limit + 3,
            "cleanup_line": next((line.strip() for line in lines if "cleanup:" in line), None),
            "load_1min": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="a checkout to run (repeatable); default: this one")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree or [ROOT]]
    rows = []
    with tempfile.TemporaryDirectory(dir=ROOT) as work:  # the tier on the project's filesystem, not /tmp's
        for repeat in range(args.repeats):
            for tree in trees[repeat % len(trees):] + trees[:repeat % len(trees)]:  # the order rotates
                row = run_once(tree, Path(work))
                rows.append(row)
                print(f"{row['tree']}: wall {row['wall_s']} s (target {row['target_s']} s), "
                      f"result after {row['result_at_s']} s, "
                      f"phases {row['phases_s']}, load {row['load_1min']:.1f}; {row['cleanup_line']}", flush=True)
    for tree in trees:
        mine = [row for row in rows if row["tree"] == str(tree)]
        for figure in ("wall_s", "result_at_s"):
            values = [row[figure] for row in mine]
            print(f"{tree}: median {figure} {statistics.median(values):.2f} (range {min(values)}-{max(values)}, "
                  f"n={len(values)})")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
