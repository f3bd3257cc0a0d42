"""Submission rules a result is checked against (``kvbench check RESULT --rules NAME``).

``mlperf-v3`` is the seed's §6 submission checklist.  Each rule reads only
the result (its resolved spec, its trials, its metrics), says pass or fail,
and gives the reason in one line a submitter can act on.  Checked on a
trials summary (``*-summary.json``); a single trial fails the trial rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbench_core.spec.units import format_bytes

GIB = 1 << 30
MIN_DURATION_S = 300.0
TRIALS_RANGE = (3, 5)
#: cpu tier capacity -> the primary metrics the seed names for it (§6 "Correct metrics for cpu_mem")
CPU_SETTING_METRICS = {
    0: ("decode_bytes_read_gb", "avg_throughput_tokens_per_sec", "nvme_read_device_p95_ms",
        "nvme_write_device_p95_ms"),
    4: ("storage_throughput_tokens_per_sec", "nvme_read_device_p95_ms", "nvme_write_device_p95_ms"),
}


@dataclass(frozen=True)
class RuleOutcome:
    rule: str
    passed: bool
    reason: str


Rule = Callable[[dict[str, Any]], RuleOutcome]


def _runs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-trial facts: the summary's list, or the single run itself."""
    trials = result.get("trials")
    if trials:
        return trials["runs"]
    window = (result.get("metrics") or {}).get("window") or {}
    return [{"trial": result["run"].get("trial"), "status": result["run"]["status"],
             "stop_reason": result["run"]["stop_reason"], "measured_s": window.get("measured_s"),
             "traced": result["run"].get("traced", False)}]


def _resolved(result: dict[str, Any]) -> dict[str, Any]:
    return result["spec"]["resolved"]


def seed_42(result: dict[str, Any]) -> RuleOutcome:
    seed = _resolved(result).get("seed")
    return RuleOutcome("seed 42", seed == 42, f"seed is {seed}" + ("" if seed == 42 else "; the rules require 42"))


def gpu_tier_off(result: dict[str, Any]) -> RuleOutcome:
    gpu = [t["name"] for t in _resolved(result)["cache"]["tiers"] if t["backend"] == "gpu" and t["capacity"] != 0]
    if gpu:
        return RuleOutcome("gpu tier off", False, f"gpu tier {', '.join(gpu)} is enabled; set its capacity to 0 "
                           "(storage isolation)")
    return RuleOutcome("gpu tier off", True, "no gpu tier enabled")


def generation_none(result: dict[str, Any]) -> RuleOutcome:
    generation = _resolved(result)["workload"].get("generation")
    ok = generation == "none"
    return RuleOutcome("generation none", ok, f"workload.generation is {generation!r}"
                       + ("" if ok else "; the rules require 'none' (pure storage)"))


def duration_300s(result: dict[str, Any]) -> RuleOutcome:
    duration = _resolved(result).get("duration")
    if duration is None or duration < MIN_DURATION_S:
        return RuleOutcome("duration >= 300 s", False, f"duration is {duration} s; the rules require >= 300 s "
                           "(steady state)")
    short = [r for r in _runs(result) if (r.get("measured_s") or 0) < MIN_DURATION_S]
    if short:
        listed = ", ".join(f"trial {r['trial']}: {r.get('measured_s') or 0:.0f} s" for r in short)
        return RuleOutcome("duration >= 300 s", False, f"measured window shorter than 300 s ({listed})")
    return RuleOutcome("duration >= 300 s", True, f"duration {duration:g} s; every trial measured >= 300 s")


def trial_count(result: dict[str, Any]) -> RuleOutcome:
    trials = result.get("trials")
    low, high = TRIALS_RANGE
    if not trials:
        return RuleOutcome("3-5 trials", False, "this is a single run; run with trials: 3-5 and check the "
                           "-summary.json")
    count = trials["count"]
    ok = low <= count <= high
    return RuleOutcome("3-5 trials", ok, f"{count} completed trials ({trials['requested']} requested)"
                       + ("" if ok else f"; the rules require {low}-{high}"))


def median_reported(result: dict[str, Any]) -> RuleOutcome:
    trials = result.get("trials")
    if not trials:
        return RuleOutcome("median reported", False, "no trials summary: a single run has no median")
    headline = result["metrics"]["headline"]
    wrong = [key for key, value in headline.items()
             if key in trials["metrics"] and value != trials["metrics"][key]["median"]]
    ok = trials["statistic"] == "median" and not wrong
    return RuleOutcome("median reported", ok, "headline = median of the trials" if ok
                       else f"headline is not the trials' median for {', '.join(wrong) or trials['statistic']}")


def trials_completed(result: dict[str, Any]) -> RuleOutcome:
    bad = [f"trial {r['trial']}: {r['status']} ({r['stop_reason']})" for r in _runs(result)
           if r["status"] != "completed"]
    return RuleOutcome("every trial completed", not bad, "; ".join(bad) or "all completed")


def cpu_setting_metrics(result: dict[str, Any]) -> RuleOutcome:
    name = "metrics for the cpu tier setting"
    capacities = [t["capacity"] for t in _resolved(result)["cache"]["tiers"] if t["backend"] == "cpu"]
    if "auto" in capacities:
        return RuleOutcome(name, False, "cpu tier capacity is 'auto'; the rules use 0 or 4 GB")
    total = sum(capacities)
    setting = next((gb for gb in CPU_SETTING_METRICS if total in (gb * GIB, gb * 10**9)), None)
    if setting is None:
        return RuleOutcome(name, False, f"cpu tier capacity is {format_bytes(total)}; the rules use 0 or 4 GB")
    headline = result["metrics"].get("headline") or {}
    missing = [key for key in CPU_SETTING_METRICS[setting] if headline.get(key) is None]
    required = ", ".join(CPU_SETTING_METRICS[setting])
    if missing:
        return RuleOutcome(name, False, f"cpu = {setting} GB reports {required}; not measured: {', '.join(missing)}")
    return RuleOutcome(name, True, f"cpu = {setting} GB: {required} reported")


def not_traced(result: dict[str, Any]) -> RuleOutcome:
    traced = [str(r["trial"]) for r in _runs(result) if r.get("traced")]
    if traced or result["run"].get("traced"):
        return RuleOutcome("not traced", False, f"block tracing was on (trial {', '.join(traced) or '?'}); "
                           "traced runs are diagnostic, not scorable")
    return RuleOutcome("not traced", True, "no block tracing")


def system_documented(result: dict[str, Any]) -> RuleOutcome:
    environment = result.get("environment") or {}
    missing = [label for label, key in (("CPU model", "cpu_model"), ("RAM size", "ram_bytes"), ("OS", "os"))
               if not environment.get(key)]
    ok = not missing
    return RuleOutcome("system info documented", ok, "CPU model, RAM and OS recorded" if ok
                       else f"missing from the environment: {', '.join(missing)}")


RULESETS: dict[str, tuple[Rule, ...]] = {
    "mlperf-v3": (seed_42, gpu_tier_off, generation_none, duration_300s, trial_count, median_reported,
                  trials_completed, cpu_setting_metrics, not_traced, system_documented),
}


def check(result: dict[str, Any], ruleset: str) -> list[RuleOutcome]:
    return [rule(result) for rule in RULESETS[ruleset]]
