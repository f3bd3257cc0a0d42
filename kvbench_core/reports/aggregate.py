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
from pathlib import Path
from typing import Any

from kvbench_core.reports.metrics import HEADLINE, measured_figures
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


def summarize_trials(results: list[dict[str, Any]], paths: list[Path], *, session_id: str,
                     requested: int) -> dict[str, Any]:
    """The summary result of a session's trials (``results`` in trial order, ``paths`` their files)."""
    counted = [r for r in results if r["run"]["status"] == "completed" and r["metrics"]]
    per_trial = [measured_figures(r) for r in counted]
    figures = {key: value.figure for measured in per_trial for key, value in measured.items()}
    stats = {key: {"label": figure.label, "unit": figure.unit, "better": figure.better,
                   **trial_statistics([m[key].value if key in m else None for m in per_trial])}
             for key, figure in figures.items()}
    first = results[0]
    verdict = trials_verdict([r["run"] for r in results], requested)  # the worst trial's (results/status.py)
    head_keys = [f.key for f in HEADLINE]
    # Every headline name, None when no trial measured it: a session whose trials all failed still writes a
    # summary the schema accepts (it refused one that named no headline figure at all).
    headline = {key: stats[key]["median"] if key in stats else None for key in head_keys}
    headline["persistent_tier"] = (first["metrics"].get("headline") or {}).get("persistent_tier")
    return {
        "kvbench_result": first["kvbench_result"],
        "kvbench_version": first["kvbench_version"],
        "plugins": first["plugins"],
        "run": {"id": session_id, "name": first["run"]["name"], "kind": "trials-summary", "status": verdict.status,
                "status_rule": verdict.rule, "status_reason": verdict.reason,
                "stop_reason": f"{len(counted)} of {requested} trials completed; headline = median",
                "error": next((r["run"]["error"] for r in results if r["run"]["error"]), None),
                "trial": None, "client_index": None, "started_at": first["run"]["started_at"],
                "finished_at": time.time(), "traced": any(r["run"]["traced"] for r in results)},
        "spec": first["spec"],
        "model": first["model"],
        "environment": first["environment"],
        "declaration": first["declaration"],
        "warnings": first.get("warnings", []),
        "metrics": {"headline": headline},
        "trials": {
            "requested": requested, "count": len(counted), "statistic": "median",
            "runs": [{"trial": r["run"]["trial"], "id": r["run"]["id"], "file": path.name,
                      "status": r["run"]["status"], "stop_reason": r["run"]["stop_reason"],
                      "status_reason": r["run"].get("status_reason"),
                      "measured_s": (r["metrics"].get("window") or {}).get("measured_s") if r["metrics"] else None,
                      "traced": r["run"]["traced"], "sha256": file_sha256(path),
                      "checks_passed": (r.get("checks") or {}).get("passed", True)}
                     for r, path in zip(results, paths, strict=True)],
            "metrics": stats,
        },
        "checks": {"passed": all((r.get("checks") or {}).get("passed", True) for r in results),
                   "violations": [f"trial {r['run']['trial']}: {line}" for r in results
                                  for line in (r.get("checks") or {}).get("violations", [])],
                   "items": []},
        **({"scale_out": first["scale_out"]} if "scale_out" in first else {}),
    }
