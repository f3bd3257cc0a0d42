"""The trials summary: per key figure the median, min, max and coefficient of variation over trials.

The seed (§6) observed CV of 50-125 % between trials and asks for 3-5 trials
with the median reported, never the mean.  The summary is itself a result
document (``run.kind: trials-summary``): its ``metrics.headline`` holds the
medians, ``trials`` the statistics and the per-trial files, so ``report``,
``compare`` and ``check`` read it like any result.  Statistics cover the
trials that completed; interrupted or failed ones are listed, not counted.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvbench_core.reports.key_figures import HEADLINE, FigureValue, measured_figures
from kvbench_core.results.document import ResultDocument, RunRecord, TrialRun, TrialsSection
from kvbench_core.results.status import trials_verdict


def trial_statistics(values: list[float | None]) -> dict[str, Any]:
    """median/min/max over the measured values; CV = sample standard deviation / mean."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "cv": None, "values": values}
    mean = statistics.fmean(present)
    cv = statistics.stdev(present) / mean if len(present) > 1 and mean else None
    return {"median": statistics.median(present), "min": min(present), "max": max(present),
            "cv": None if cv is None else round(cv, 6), "values": values}


def file_sha256(path: Path) -> str:
    """The sha256 of a trial's result file as written: ``kvbench check`` verifies the file it re-derives
    the summary from is the one the session wrote."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def summarize_trials(trials: Sequence[ResultDocument], paths: list[Path], *, session_id: str,
                     requested: int) -> ResultDocument:
    """The summary result of a session's trials (``trials`` in trial order, ``paths`` their files), a
    ``ResultDocument`` like any result (the session writes its ``to_json``)."""
    counted = [t for t in trials if t.run.status == "completed" and t.metrics]
    stats = figure_statistics([measured_figures(t) for t in counted])
    first = trials[0]
    verdict = trials_verdict([t.run.to_json() for t in trials], requested)  # the worst trial's (results/status.py)
    run = RunRecord(id=session_id, name=first.run.name, kind="trials-summary", status=verdict.status,
                    status_rule=verdict.rule, status_reason=verdict.reason,
                    stop_reason=f"{len(counted)} of {requested} trials completed; headline = median",
                    error=next((t.run.error for t in trials if t.run.error), None), trial=None, client_index=None,
                    started_at=first.run.started_at, finished_at=time.time(), traced=any(t.run.traced for t in trials))
    summary = ResultDocument(
        format=first.format, kvbench_version=first.kvbench_version, plugins=first.plugins, run=run,
        spec=first.spec, model=first.model, environment=first.environment, declaration=first.declaration,
        warnings=first.warnings, metrics={"headline": _headline(stats, first)}, checks=_checks(trials),
        trials=TrialsSection(requested, len(counted), "median",
                             tuple(_trial_run(t, path) for t, path in zip(trials, paths, strict=True)), stats),
        scale_out=first.scale_out)
    return summary


def figure_statistics(per_trial: list[dict[str, FigureValue]]) -> dict[str, dict[str, Any]]:
    """Per key figure of the trials (``measured_figures`` of each), its names and ``trial_statistics``."""
    figures = {key: value.figure for measured in per_trial for key, value in measured.items()}
    return {key: {"label": figure.label, "unit": figure.unit, "better": figure.better,
                  **trial_statistics([m[key].value if key in m else None for m in per_trial])}
            for key, figure in figures.items()}


def _headline(stats: dict[str, dict[str, Any]], first: ResultDocument) -> dict[str, Any]:
    """Every headline name with its median, None when no trial measured it: a session whose trials all failed
    still writes a summary the schema accepts (it refused one that named no headline figure at all)."""
    headline: dict[str, Any] = {f.key: stats[f.key]["median"] if f.key in stats else None for f in HEADLINE}
    headline["persistent_tier"] = first.headline.get("persistent_tier")
    return headline


def _trial_run(trial: ResultDocument, path: Path) -> TrialRun:
    return TrialRun(trial=trial.run.trial or 0, id=trial.run.id, file=path.name, status=trial.run.status,
                    stop_reason=trial.run.stop_reason, status_reason=trial.run.status_reason,
                    measured_s=trial.window.get("measured_s"), traced=trial.run.traced,
                    sha256=file_sha256(path), checks_passed=trial.checks.get("passed", True))


def _checks(trials: list[ResultDocument]) -> dict[str, Any]:
    """Every trial's invariants held; the violations prefixed with their trial."""
    return {"passed": all(t.checks.get("passed", True) for t in trials),
            "violations": [f"trial {t.run.trial}: {line}" for t in trials for line in t.checks.get("violations", [])],
            "items": []}
