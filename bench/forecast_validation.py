"""Re-make docs/FORECAST.md's validation table: measured runs held out of the fit, predicted by
``kvbench forecast`` from one fitted run, on two tier set-ups (DRAM+nvme, nvme+redis).

Needs: the forecast extra and the redis plugin: pip install -e '.[forecast]' -e plugins/kvbench_redis; redis-server.

    .venv/bin/python bench/forecast_validation.py [--work DIR] [--duration 30s] [--budget 6m]

DRAM+nvme: fitted at 4 users (4 workers, 1 client); held out: 2, 8 and 16 users (workers = users), 2 and
4 local clients sharing the nvme device, and the ``max users within SLA`` that ``kvbench capacity``
measures (4 workers).  Each set-up's fit is also measured once more after its held-out runs and forecast
unchanged: the machine's drift between two runs of one spec, shown beside the points and left out of
their medians.  nvme+redis: fitted on 1 client; held out: 2 and 4 clients sharing the nvme device
and one real redis-server on 127.0.0.1 (started here, on a free port, and stopped at the end).  Each
measured run is a real ``kvbench run``; each forecast reads only the fitted run's result.  Prints the
markdown table (with the load average at each run: the machine is shared) and writes every figure to
``DIR/validation.json``.
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the forecast extra and the redis plugin: pip install -e '.[forecast]' -e plugins/kvbench_redis; redis-server",
     modules=("simpy", "greenlet", "kvbench_redis", "kvbench_nvme"), programs=("redis-server",))

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kvbench_core.forecast.forecast import Forecaster, measured_figures
from kvbench_core.forecast.search import max_users_within_sla

KVBENCH = str(Path(sys.executable).with_name("kvbench"))
#: Loose enough that a shared 2-core machine's slow disk is within it at a few users (p95 2-5 s seen at 4).
SLA = {name: {"p95": "4s", "p99": "10s"} for name in ("interactive", "responsive", "batch")}
MIN_REQUESTS = 20  # a class's p95 is compared where both sides have this many requests


def spec(work: Path, name: str, tiers: list[dict[str, Any]], *, users: int, workers: int, clients: int,
         duration: str) -> Path:
    """The validation's workload: small chatbot entries (0.75-6 MiB of qwen2.5-0.5b KV), so a window holds
    enough requests per class on a slow shared disk."""
    document = {
        "version": 1, "name": name, "seed": 11, "clients": clients,
        "model": {"name": "qwen2.5-0.5b", "dtype": "bf16"}, "duration": duration, "warmup": "3s",
        "workload": {"source": "synthetic", "users": users, "max_inflight": workers, "generation": "fast",
                     "options": {"profile_mix": {"chatbot": 1},
                                 "qos_mix": {"interactive": 0, "responsive": 0.5, "batch": 0.5},
                                 "profiles": {"chatbot": {"context": [64, 512], "think_s": [0.1, 0.5]}},
                                 "multi_turn": {"turn_tokens": [32, 256]},
                                 "prefix_caching": {"prefix_tokens": [32, 256]}}},
        "qos": SLA, "cache": {"tiers": tiers},
        "output": {"directory": str(work / "results" / name), "progress": "off", "exit_zero": True},
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def dram_nvme(work: Path) -> list[dict[str, Any]]:
    return [{"name": "dram", "backend": "cpu", "capacity": "32MiB"},
            {"name": "nvme", "backend": "nvme", "capacity": "2GiB",
             "options": {"path": str(work / "kv-a"), "create": True}}]


def nvme_redis(work: Path, port: int) -> list[dict[str, Any]]:
    return [{"name": "nvme", "backend": "nvme", "capacity": "48MiB",
             "options": {"path": str(work / "kv-b"), "create": True}},
            {"name": "redis", "backend": "redis", "capacity": "2GiB", "options": {"port": port}}]


def run(path: Path) -> tuple[Path, float]:
    """A real ``kvbench run``: its result (the merged one for several clients) and the load average before.
    A run already in ``--work`` is reused (a re-run of the bench after one point failed keeps the others).
    A run whose status is not ``completed`` still measured its figures; its row says the status."""
    out = Path(yaml.safe_load(path.read_text())["output"]["directory"])
    load_file = out / "load_avg"
    if not list(out.glob("*.json")):
        load = os.getloadavg()[0]
        subprocess.run([KVBENCH, "run", str(path), "-q"], stdout=subprocess.DEVNULL)
        out.mkdir(parents=True, exist_ok=True)
        load_file.write_text(f"{load}\n")
    results = list(out.glob("*.json"))
    if not results:
        raise SystemExit(f"forecast_validation: {path} wrote no result")
    return max(results, key=lambda p: p.stat().st_mtime), float(load_file.read_text()) if load_file.exists() else -1.0


def compare(predicted: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """Relative errors: each class's p95 (both sides with 20 requests), requests/s, each tier's GB/s."""
    p95 = {name: predicted["qos"][name]["service_p95_ms"] / q["service_p95_ms"] - 1
           for name, q in measured["qos"].items()
           if q["requests"] >= MIN_REQUESTS and predicted["qos"][name]["requests"] >= MIN_REQUESTS}
    bandwidth = {}
    for tier, ops in measured["tiers"].items():
        moved = sum(ops.values())
        if moved > 0:
            bandwidth[tier] = sum(predicted["tiers"].get(tier, {}).values()) / moved - 1
    return {"p95": p95, "throughput": predicted["requests_per_s"] / measured["requests_per_s"] - 1,
            "bandwidth": bandwidth}


def point(rows: list[dict[str, Any]], setup: str, held_out: str, command: str, fitted: Forecaster,
          measured_path: Path, load: float, *, sets: list[str], clients: int | None = None,
          drift: bool = False) -> None:
    predicted = fitted.forecast(sets, [], clients)
    document = json.loads(measured_path.read_text())
    measured = measured_figures(document)
    rows.append({"setup": setup, "held_out": held_out, "command": command, "load_avg": round(load, 1), "drift": drift,
                 "status": document["run"]["status"], "status_reason": document["run"].get("status_reason"),
                 "predicted": predicted, "measured": measured, "error": compare(predicted, measured)})


def capacity(path: Path) -> tuple[dict[str, Any], float]:
    """``kvbench capacity``'s measured answer (its JSON) and the load average before (reused from ``--work``)."""
    answer = path.with_suffix(".answer.json")
    if not answer.exists():
        load = os.getloadavg()[0]
        done = subprocess.run([KVBENCH, "capacity", str(path), "--budget", ARGS.budget, "--json", "-q"],
                              check=True, capture_output=True, text=True)
        answer.write_text(json.dumps({"answer": json.loads(done.stdout), "load_avg": load}))
    recorded = json.loads(answer.read_text())
    return recorded["answer"], float(recorded["load_avg"])


def again(rows: list[dict[str, Any]], setup: str, work: Path, tiers: list[dict[str, Any]], fitted: Forecaster) -> None:
    """The fit's own set-up measured once more, after the held-out runs, and forecast from the fit unchanged:
    no extrapolation, so its error is the machine's drift between two runs of one spec (the floor under
    every other point's error).  Shown in the table, left out of the medians (the issue's points are those)."""
    name = f"{Path(fitted.path).parent.name}-again"
    measured, load = run(spec(work, name, tiers, users=4, workers=4, clients=1, duration=ARGS.duration))
    point(rows, setup, "the fit's own set-up, again (drift)", "kvbench forecast FIT", fitted, measured, load,
          sets=[], drift=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def setup_dram_nvme(work: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    tiers, d = dram_nvme(work), ARGS.duration
    fit_path, fit_load = run(spec(work, "a-fit", tiers, users=4, workers=4, clients=1, duration=d))
    fitted = Forecaster(str(fit_path))
    for users in (2, 8, 16):
        measured, load = run(spec(work, f"a-u{users}", tiers, users=users, workers=users, clients=1, duration=d))
        point(rows, "DRAM+nvme", f"{users} users ({users} workers)",
              f"kvbench forecast FIT --set workload.users={users} --set workload.max_inflight={users}",
              fitted, measured, load, sets=[f"workload.users={users}", f"workload.max_inflight={users}"])
    for clients in (2, 4):
        measured, load = run(spec(work, f"a-c{clients}", tiers, users=4, workers=4, clients=clients, duration=d))
        point(rows, "DRAM+nvme", f"{clients} clients x 4 users", f"kvbench forecast FIT --clients {clients}",
              fitted, measured, load, sets=[], clients=clients)
    again(rows, "DRAM+nvme", work, tiers, fitted)
    answer, load = capacity(spec(work, "a-capacity", tiers, users=4, workers=4, clients=1, duration=d))
    search = max_users_within_sla(fitted, [], [], None, 4, ceiling=256)
    return {"fit": str(fit_path), "fit_load_avg": round(fit_load, 1),
            "capacity_measured": answer["max_users_within_sla"], "capacity_ci95": answer["ci95"],
            "capacity_bracket": answer.get("bracket"), "capacity_finished": answer.get("search_finished"),
            "capacity_load_avg": round(load, 1), "capacity_forecast": search["max_users_within_sla"],
            "capacity_forecast_steps": search["steps"]}


def setup_nvme_redis(work: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        tiers, d = nvme_redis(work, port), ARGS.duration
        fit_path, fit_load = run(spec(work, "b-fit", tiers, users=4, workers=4, clients=1, duration=d))
        fitted = Forecaster(str(fit_path))
        for clients in (2, 4):
            measured, load = run(spec(work, f"b-c{clients}", tiers, users=4, workers=4, clients=clients,
                                      duration=d))
            point(rows, "nvme+redis", f"{clients} clients x 4 users", f"kvbench forecast FIT --clients {clients}",
                  fitted, measured, load, sets=[], clients=clients)
        again(rows, "nvme+redis", work, tiers, fitted)
        return {"fit": str(fit_path), "fit_load_avg": round(fit_load, 1)}
    finally:
        server.terminate()
        server.wait(10)


def pct(value: float) -> str:
    return f"{value * 100:+.0f} %"


def table(rows: list[dict[str, Any]], a: dict[str, Any]) -> list[str]:
    lines = ["| set-up | held out | load avg | p95 service ms, predicted / measured (error) | requests/s "
             "predicted / measured (error) | GB/s per tier, predicted / measured (error) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        p, m, e = row["predicted"], row["measured"], row["error"]
        p95 = "; ".join(f"{name} {p['qos'][name]['service_p95_ms']:.0f} / {m['qos'][name]['service_p95_ms']:.0f} "
                        f"({pct(err)})" for name, err in e["p95"].items()) or "too few requests"
        bandwidth = "; ".join(f"{tier} {sum(p['tiers'].get(tier, {}).values()):.3f} / "
                              f"{sum(m['tiers'][tier].values()):.3f} ({pct(err)})"
                              for tier, err in e["bandwidth"].items())
        held_out = row["held_out"] + ("" if row["status"] == "completed" else f" (run {row['status']})")
        lines.append(f"| {row['setup']} | {held_out} | {row['load_avg']} | {p95} | "
                     f"{p['requests_per_s']:.2f} / {m['requests_per_s']:.2f} ({pct(e['throughput'])}) | {bandwidth} |")
    low, high = a["capacity_ci95"]
    lines.append(f"| DRAM+nvme | max users within SLA (4 workers) | {a['capacity_load_avg']} | forecast "
                 f"{a['capacity_forecast']}, measured {a['capacity_measured']} (95 % CI {low}-{high}; "
                 f"{a['capacity_bracket']}) | | |")
    held = [row for row in rows if not row["drift"]]
    p95 = [abs(err) for row in held for err in row["error"]["p95"].values()]
    throughput = [abs(row["error"]["throughput"]) for row in held]
    bandwidth = [abs(err) for row in held for err in row["error"]["bandwidth"].values()]
    lines += ["", f"median absolute error: p95 service {statistics.median(p95) * 100:.0f} % ({len(p95)} class "
              f"points), throughput {statistics.median(throughput) * 100:.0f} % ({len(throughput)} points), "
              f"tier bandwidth {statistics.median(bandwidth) * 100:.0f} % ({len(bandwidth)} tier points)"]
    return lines


def main() -> int:
    work = Path(ARGS.work or tempfile.mkdtemp(prefix="kvbench-forecast-validation-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    started = time.time()
    a = setup_dram_nvme(work, rows)
    b = setup_nvme_redis(work, rows)
    lines = table(rows, a)
    (work / "validation.json").write_text(json.dumps({"rows": rows, "dram_nvme": a, "nvme_redis": b,
                                                      "cpus": os.cpu_count(), "wall_s": time.time() - started},
                                                     indent=1))
    print("\n".join(lines))
    print(f"\nfigures: {work / 'validation.json'}; fits: {a['fit']}, {b['fit']}")
    for leftover in (work / "kv-a", work / "kv-b"):
        shutil.rmtree(leftover, ignore_errors=True)  # the tier directories these runs created
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", help="where specs, results and validation.json go (default: a new temp dir)")
    parser.add_argument("--duration", default="30s", help="each measured run's window (default 30s)")
    parser.add_argument("--budget", default="6m", help="kvbench capacity's budget (default 6m)")
    ARGS = parser.parse_args()
    sys.exit(main())
