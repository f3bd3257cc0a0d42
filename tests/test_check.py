"""``kvbench check --rules mlperf-v3``: the seed's §6 submission checklist, rule by rule."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.cli import main
from kvbench_core.reports.rules import check

GIB = 1 << 30


def _submission(cpu_capacity: int = 0) -> dict[str, Any]:
    """A trials summary that satisfies every mlperf-v3 rule (option 1 when cpu is 0, option 2 at 4 GiB)."""
    tiers = [{"name": "nvme", "backend": "nvme", "capacity": 100 * GIB}]
    if cpu_capacity:
        tiers.insert(0, {"name": "dram", "backend": "cpu", "capacity": cpu_capacity})
    headline = {"decode_bytes_read_gb": 1195.0, "avg_throughput_tokens_per_sec": 557.0,
                "storage_throughput_tokens_per_sec": 88.0, "nvme_read_device_p95_ms": 892.0,
                "nvme_write_device_p95_ms": 156.0, "end_to_end_latency_p95_ms": 4000.0, "cache_hit_rate": 0.1,
                "requests_completed": 5000, "persistent_tier": "nvme"}
    stats = {key: {"label": key, "unit": "", "better": "higher", "median": value, "min": value, "max": value,
                   "cv": 0.0, "values": [value] * 5} for key, value in headline.items() if key != "persistent_tier"}
    return {
        "kvbench_result": 1,
        "run": {"id": "s", "name": "mlperf", "kind": "trials-summary", "status": "completed", "traced": False},
        "spec": {"resolved": {"seed": 42, "duration": 300.0, "trials": 5,
                              "workload": {"generation": "none", "users": 200},
                              "cache": {"tiers": tiers}}},
        "environment": {"cpu_model": "Xeon", "ram_bytes": 256 * GIB, "os": "Ubuntu 22.04"},
        "metrics": {"headline": headline},
        "trials": {"requested": 5, "count": 5, "statistic": "median", "metrics": stats,
                   "runs": [{"trial": n, "id": f"s-t{n}", "file": f"t{n}.json", "status": "completed",
                             "stop_reason": "duration reached", "measured_s": 301.2, "traced": False}
                            for n in range(1, 6)]},
    }


def _failed(result: dict[str, Any]) -> dict[str, str]:
    return {o.rule: o.reason for o in check(result, "mlperf-v3") if not o.passed}


@pytest.mark.parametrize("cpu", [0, 4 * GIB, 4 * 10**9])
def test_a_conforming_submission_passes_every_rule(cpu: int) -> None:
    assert _failed(_submission(cpu)) == {}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return apply


def _tier_in_front(backend: str, capacity: int) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        doc["spec"]["resolved"]["cache"]["tiers"].insert(0, {"name": "front", "backend": backend,
                                                             "capacity": capacity})
    return apply


def _unmeasured_read_p95(doc: dict[str, Any]) -> None:
    doc["metrics"]["headline"]["nvme_read_device_p95_ms"] = None
    doc["trials"]["metrics"]["nvme_read_device_p95_ms"]["median"] = None


@pytest.mark.parametrize(("mutate", "rule", "fragment"), [
    (_set("spec.resolved.seed", 7), "seed 42", "seed is 7"),
    (_tier_in_front("gpu", GIB), "gpu tier off", "gpu tier front is enabled"),
    (_set("spec.resolved.workload.generation", "realistic"), "generation none", "'realistic'"),
    (_set("spec.resolved.duration", 60.0), "duration >= 300 s", "duration is 60.0 s"),
    (_set("trials.runs.2.measured_s", 120.0), "duration >= 300 s", "trial 3: 120 s"),
    (_set("trials.count", 2), "3-5 trials", "2 completed trials"),
    (_set("metrics.headline.decode_bytes_read_gb", 1.0), "median reported", "decode_bytes_read_gb"),
    (_set("trials.runs.0.status", "interrupted"), "every trial completed", "trial 1: interrupted"),
    (_tier_in_front("cpu", 8 * GIB), "metrics for the cpu tier setting", "8.00 GiB"),
    (_unmeasured_read_p95, "metrics for the cpu tier setting", "not measured: nvme_read_device_p95_ms"),
    (_set("trials.runs.1.traced", True), "not traced", "not scorable"),
    (_set("environment.cpu_model", None), "system info documented", "CPU model"),
])
def test_each_rule_fails_with_its_reason(mutate: Callable[[dict[str, Any]], None], rule: str, fragment: str) -> None:
    doc = copy.deepcopy(_submission())
    mutate(doc)
    failed = _failed(doc)
    assert rule in failed, failed
    assert fragment in failed[rule]


def test_a_single_trial_is_not_a_submission() -> None:
    doc = _submission()
    del doc["trials"], doc["run"]["kind"]
    doc["run"].update(trial=1, stop_reason="duration reached")
    doc["metrics"]["window"] = {"measured_s": 300.5}
    failed = _failed(doc)
    assert set(failed) == {"3-5 trials", "median reported"}
    assert "-summary.json" in failed["3-5 trials"]


def test_check_command_lists_every_rule_and_exits_1_on_a_failure(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_submission()))
    doc = _submission()
    doc["spec"]["resolved"]["seed"] = 1
    bad.write_text(json.dumps(doc))
    assert main(["check", str(good), "--rules", "mlperf-v3"]) == 0
    assert "10 passed, 0 failed" in capsys.readouterr().out
    assert main(["check", str(bad), "--rules", "mlperf-v3", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    assert [c["rule"] for c in report["checks"] if not c["passed"]] == ["seed 42"]
