"""Submission rules a result is checked against (``kvbench check RESULT --rules NAME``).

Every rule set starts with ``INVARIANTS``: the document is what kvbench
wrote (format, schema, spec hash), every figure re-derives from its raw
material (results/rederive.py), a summary's figures from its trial files,
its status from the status rules (results/status.py), its invariants hold.
``mlperf-v3`` adds the seed's §6 submission checklist (mlperf-kv-cache-v3-spec.txt,
"Critical Parameters" and "Submission Checklist").  The rules judge the
evidence reports/evidence.py reads and verifies, never a summary's own
numbers.  Each rule says pass or fail with the reason in one line a
submitter can act on.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench_core.contracts.units import format_bytes
from kvbench_core.reports.aggregate import figure_statistics
from kvbench_core.reports.evidence import Evidence, gather, rederived_headline
from kvbench_core.reports.key_figures import HEADLINE, measured_figures
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.document import problems as document_problems
from kvbench_core.results.invariants import run_checks
from kvbench_core.results.rederive import IncompleteResult, figure_checks, figure_count, listed, rederived_metrics

GIB = 1 << 30
MIN_DURATION_S = 300.0
TRIALS_RANGE = (3, 5)
#: The models the seed's submission options run (Options 1-2: 8B; Option 3: 70B).
SUBMISSION_MODELS = ("llama3.1-8b", "llama3.1-70b-instruct")
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


Rule = Callable[[Evidence], RuleOutcome]


def trial_files_verified(evidence: Evidence) -> RuleOutcome:
    name = "trial files verified"
    if not evidence.summary:
        return RuleOutcome(name, True, "one result, not a trials summary: it is its own evidence (no trial files "
                                       "to read)")
    if evidence.problems:
        return RuleOutcome(name, False, "; ".join(evidence.problems))
    return RuleOutcome(name, True, f"{len(evidence.trials)} trial files read; sha256 and spec hash verified")


def seed_42(evidence: Evidence) -> RuleOutcome:
    seeds = sorted({spec.get("seed") for spec in evidence.specs()}, key=str)
    ok = seeds == [42]
    return RuleOutcome("seed 42", ok, f"seed is {', '.join(map(str, seeds))}"
                       + ("" if ok else "; the rules require 42"))


def model_submitted(evidence: Evidence) -> RuleOutcome:
    names = sorted({str((t.model or {}).get("name")) for t in evidence.trials or [evidence.result]})
    bad = [n for n in names if n not in SUBMISSION_MODELS]
    return RuleOutcome("model", not bad, f"model {', '.join(names)}" + (
        f"; the rules run {' or '.join(SUBMISSION_MODELS)}" if bad else ""))


def _spec_rule(name: str, get: Callable[[dict[str, Any]], Any], wanted: Any, why: str) -> Rule:
    def rule(evidence: Evidence) -> RuleOutcome:
        found = sorted({repr(get(spec)) for spec in evidence.specs()})
        ok = found == [repr(wanted)]
        return RuleOutcome(name, ok, f"{', '.join(found)}" + ("" if ok else f"; the rules require {wanted!r} ({why})"))
    rule.__name__ = name.replace(" ", "_")
    return rule


generation_none = _spec_rule("generation none", lambda s: s["workload"].get("generation"), "none",
                             "pure storage")
mode_mixed = _spec_rule("prefill and decode", lambda s: s["workload"].get("mode", "mixed"), "mixed",
                        "the seed's requests write their prefill and read it back to decode")
autoscaler_off = _spec_rule("no autoscaler", lambda s: (s.get("autoscaler") or {}).get("name"), None,
                            "a fixed user count; autoscaling is capacity discovery, not a submission")
promotion_none = _spec_rule("no promotion", lambda s: s["cache"].get("promotion", "none"), "none",
                            "the seed's waterfall is one way")


def gpu_tier_off(evidence: Evidence) -> RuleOutcome:
    gpu = sorted({t["name"] for spec in evidence.specs() for t in spec["cache"]["tiers"]
                  if t["backend"] == "gpu" and t["capacity"] != 0})
    if gpu:
        return RuleOutcome("gpu tier off", False, f"gpu tier {', '.join(gpu)} is enabled; set its capacity to 0 "
                           "(storage isolation)")
    return RuleOutcome("gpu tier off", True, "no gpu tier enabled")


def duration_300s(evidence: Evidence) -> RuleOutcome:
    durations = sorted({spec.get("duration") for spec in evidence.specs()}, key=lambda d: d or 0)
    if any(d is None or d < MIN_DURATION_S for d in durations):
        shown = ", ".join(str(d) for d in durations)
        return RuleOutcome("duration >= 300 s", False, f"duration is {shown} s; the rules require >= 300 s "
                           "(steady state)")
    short = [(t.run.trial, t.window["measured_s"]) for t in evidence.completed()
             if t.window["measured_s"] < MIN_DURATION_S]
    if short:
        listed = ", ".join(f"trial {n}: {s:.0f} s" for n, s in short)
        return RuleOutcome("duration >= 300 s", False, f"measured window shorter than 300 s ({listed})")
    return RuleOutcome("duration >= 300 s", True, f"duration {durations[0]:g} s; every trial measured >= 300 s")


def trial_count(evidence: Evidence) -> RuleOutcome:
    low, high = TRIALS_RANGE
    if not evidence.summary:
        return RuleOutcome("3-5 trials", False, "this is a single run; run with trials: 3-5 and check the "
                           "-summary.json")
    count = len(evidence.completed())
    ok = low <= count <= high
    return RuleOutcome("3-5 trials", ok, f"{count} completed trials read ({evidence.trials_section.requested} "
                       "requested)" + ("" if ok else f"; the rules require {low}-{high}"))


def _headline_differences(evidence: Evidence) -> list[str]:
    """Each headline figure of the summary that is not the median of that figure re-derived from the
    completed trials' files."""
    derived = [rederived_headline(t) for t in evidence.completed()]
    stated = evidence.result.headline
    wrong = []
    for figure in HEADLINE:
        values = [d[figure.key] for d in derived if d.get(figure.key) is not None]
        median = statistics.median(values) if values else None
        if stated.get(figure.key) != median:
            wrong.append(f"{figure.key} is {stated.get(figure.key)}, the trials' median is {median}")
    return wrong


def _statistics_differences(evidence: Evidence) -> list[str]:
    """Each figure statistic of the summary's ``trials.metrics`` (median, min, max, cv, the values) that
    differs from the statistic over the completed trials' re-derived figures (the session's own formula,
    ``figure_statistics``, on figures re-derived instead of read)."""
    per_trial = []
    for trial in evidence.completed():
        try:
            # figures of the time series (the peak interval) are read from the trial, the rest re-derived
            per_trial.append(measured_figures(dataclasses.replace(
                trial, metrics=rederived_metrics(trial.to_json()) or {})))
        except IncompleteResult:
            per_trial.append({})  # named by the figures rule
    derived, stated = figure_statistics(per_trial), evidence.trials_section.metrics
    wrong = []
    for key in dict.fromkeys([*stated, *derived]):
        given, ought = stated.get(key) or {}, derived.get(key) or {}
        wrong += [f"trials.metrics.{key}.{name} is {given.get(name)}, re-derived {ought.get(name)}"
                  for name in ("median", "min", "max", "cv", "values") if given.get(name) != ought.get(name)]
    return wrong


def median_reported(evidence: Evidence) -> RuleOutcome:
    """The summary's headline = the median of the headline re-derived from each trial file."""
    if not evidence.summary:
        return RuleOutcome("median reported", False, "no trials summary: a single run has no median")
    wrong = _headline_differences(evidence)
    ok = bool(evidence.completed()) and not wrong and evidence.trials_section.statistic == "median"
    return RuleOutcome("median reported", ok, "headline = median of the re-derived trial figures" if ok
                       else "; ".join(wrong) or "no completed trial to take a median of")


def summary_rederived(evidence: Evidence) -> RuleOutcome:
    """A trials summary's headline and per-figure statistics = those of its trials' re-derived figures."""
    name = "summary re-derived"
    if not evidence.summary:
        return RuleOutcome(name, True, "one result, not a trials summary: its figures are re-derived above")
    wrong = _headline_differences(evidence) + _statistics_differences(evidence)
    if wrong:
        return RuleOutcome(name, False, listed(wrong))
    return RuleOutcome(name, True, f"headline and statistics = those of the {len(evidence.completed())} completed "
                                   "trials' re-derived figures")


def document_valid(evidence: Evidence) -> RuleOutcome:
    """The format version, the published schema and the spec's sha256, of the document and each trial."""
    docs = [evidence.result, *(evidence.trials if evidence.summary else ())]
    bad = [(evidence.label(doc) if doc is not evidence.result else "") + problem
           for doc in docs for problem in document_problems(doc.to_json())]
    return RuleOutcome("format, schema and spec hash", not bad, listed(bad) or
                       "result format, result.schema.json and the spec's sha256 verified")


def status_rederived(evidence: Evidence) -> RuleOutcome:
    """The recorded status is the one the status rules (results/status.py) give the document's own counts
    and re-checked invariants; a summary's, the one they give its trial files' statuses."""
    name = "status re-derived"
    runs = [t.run.to_json() for t in evidence.trials] if evidence.summary and not evidence.problems else None
    decided = evidence.result.rederived_verdict(runs)
    recorded = evidence.result.run.status
    if recorded != decided.status:
        return RuleOutcome(name, False, f"run.status is {recorded!r}; the rules give {decided.status!r} "
                                        f"({decided.rule}: {decided.reason})")
    return RuleOutcome(name, True, f"{recorded} ({decided.rule}: {decided.reason})")


def figures_rederived(evidence: Evidence) -> RuleOutcome:
    """Every figure of every trial (a single result: of the result) = its re-derivation from the raw
    material the result keeps (results/rederive.py)."""
    name = "figures re-derived"
    bad, count = [], 0
    for trial in evidence.trials:
        data = trial.to_json()
        bad += [evidence.label(trial) + check.line() for check in figure_checks(data)]
        count += figure_count(data)
    if bad:
        return RuleOutcome(name, False, listed(bad))
    if not count:
        return RuleOutcome(name, True, "no measured window: no figure to re-derive")
    return RuleOutcome(name, True, f"all {count} figures re-derived from the histograms and counts and match")


def trials_completed(evidence: Evidence) -> RuleOutcome:
    runs = evidence.trials_section.runs if evidence.summary else [evidence.result.run]
    bad = [f"trial {r.trial}: {r.status} ({r.stop_reason})" for r in runs if r.status != "completed"]
    bad += [f"trial {t.run.trial}: {t.run.status} in its file" for t in evidence.trials
            if t.run.status != "completed"]
    return RuleOutcome("every trial completed", not bad, "; ".join(dict.fromkeys(bad)) or "all completed")


def no_failed_writes(evidence: Evidence) -> RuleOutcome:
    """Every measured trial, whatever its status: a degraded trial is the one with failed writes, so
    judging only the completed ones printed "pass" for it."""
    measured = [t for t in evidence.trials if t.metrics]
    if not measured:
        return RuleOutcome("no failed writes", False, "no trial measured: no writes to judge")
    bad = []
    for trial in measured:
        errors = sum(t["write"]["errors"] for t in trial.tiers.values())
        failed = trial.requests["failed"]
        no_room = trial.requests.get("write_failed", 0)  # KV no tier could store
        if errors or failed or no_room:
            bad.append(f"trial {trial.run.trial}: {errors} failed writes, {failed} failed requests, "
                       f"{no_room} requests whose KV found no room")
    return RuleOutcome("no failed writes", not bad, "; ".join(bad) or "every write and request succeeded")


def invariants_hold(evidence: Evidence) -> RuleOutcome:
    checked = [(t, run_checks(t.to_json())) for t in evidence.trials]
    bad = [f"trial {t.run.trial}: {line}" for t, checks in checked for line in checks["violations"]]
    count = sum(len(checks["items"]) for _, checks in checked)
    if not bad and not count:  # a run that failed or was stopped before its window opened has none to check
        return RuleOutcome("invariants", True, "no measured window: no invariant applies (nothing was measured)")
    return RuleOutcome("invariants", not bad, "; ".join(bad) or f"all {count} invariants re-checked and hold")


def cpu_setting_metrics(evidence: Evidence) -> RuleOutcome:
    name = "metrics for the cpu tier setting"
    settings = set()
    for spec in evidence.specs():
        capacities = [t["capacity"] for t in spec["cache"]["tiers"] if t["backend"] == "cpu"]
        if "auto" in capacities:
            return RuleOutcome(name, False, "cpu tier capacity is 'auto'; the rules use 0 or 4 GB")
        total = sum(capacities)
        setting = next((gb for gb in CPU_SETTING_METRICS if total in (gb * GIB, gb * 10**9)), None)
        if setting is None:
            return RuleOutcome(name, False, f"cpu tier capacity is {format_bytes(total)}; the rules use 0 or 4 GB")
        settings.add(setting)
    if len(settings) > 1:
        return RuleOutcome(name, False, "the trials ran different cpu tier capacities")
    setting = settings.pop()
    derived = [rederived_headline(t) for t in evidence.completed()] or [{}]
    missing = sorted({key for head in derived for key in CPU_SETTING_METRICS[setting] if head.get(key) is None})
    required = ", ".join(CPU_SETTING_METRICS[setting])
    if missing:
        return RuleOutcome(name, False, f"cpu = {setting} GB reports {required}; not measured: {', '.join(missing)}")
    return RuleOutcome(name, True, f"cpu = {setting} GB: {required} reported")


def not_traced(evidence: Evidence) -> RuleOutcome:
    runs = [*(evidence.trials_section.runs if evidence.summary else ()), *(t.run for t in evidence.trials)]
    traced = sorted({str(r.trial) for r in runs if r.traced})
    if traced or evidence.result.run.traced:
        return RuleOutcome("not traced", False, f"block tracing was on (trial {', '.join(traced) or '?'}); "
                           "traced runs are diagnostic, not scorable")
    return RuleOutcome("not traced", True, "no block tracing")


def system_documented(evidence: Evidence) -> RuleOutcome:
    """The seed's checklist: CPU, RAM and the NVMe model (with the OS): the model of the block device under
    every file tier, as the run detected it (``environment.paths.<tier>.block_device.model``)."""
    environments = [t.environment for t in evidence.trials] or [evidence.result.environment]
    missing = sorted({label for env in environments
                      for label, key in (("CPU model", "cpu_model"), ("RAM size", "ram_bytes"), ("OS", "os"))
                      if not env.get(key)})
    missing += sorted({f"the storage device model under tier {tier}" for env in environments
                       for tier, path in (env.get("paths") or {}).items()
                       if not ((path or {}).get("block_device") or {}).get("model")})
    if not any(env.get("paths") for env in environments):
        missing.append("the NVMe model (no file tier's block device recorded)")
    ok = not missing
    return RuleOutcome("system info documented", ok, "CPU model, RAM, OS and the storage device model recorded"
                       if ok else f"missing from the environment: {', '.join(missing)}")


#: What every rule set checks first: the document is what kvbench wrote, and every figure in it re-derives.
INVARIANTS: tuple[Rule, ...] = (trial_files_verified, document_valid, figures_rederived, summary_rederived,
                                invariants_hold, status_rederived)
RULESETS: dict[str, tuple[Rule, ...]] = {
    "invariants": INVARIANTS,
    "mlperf-v3": (*INVARIANTS, seed_42, model_submitted, gpu_tier_off, generation_none, mode_mixed, autoscaler_off,
                  promotion_none, duration_300s, trial_count, median_reported, trials_completed, no_failed_writes,
                  cpu_setting_metrics, not_traced, system_documented),
}


def check(result: ResultDocument, ruleset: str, directory: str | Path | None = None) -> list[RuleOutcome]:
    """Every rule of ``ruleset`` on ``result``; a summary's trial files are read from ``directory``."""
    evidence = gather(result, directory)
    return [rule(evidence) for rule in RULESETS[ruleset]]
