"""Trials: every trial writes its result, the summary reports median/min/max/CV and the median is the headline."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from tiny_spec import assert_valid_result, tiny_spec

from kvbench_core.cli import main
from kvbench_core.reports.aggregate import trial_statistics
from kvbench_core.reports.key_figures import HEADLINE


def test_statistics_are_median_min_max_and_sample_cv() -> None:
    stats = trial_statistics([10.0, 30.0, None, 20.0, 40.0])
    assert (stats["median"], stats["min"], stats["max"]) == (25.0, 10.0, 40.0)
    assert stats["cv"] == pytest.approx(statistics.stdev([10, 20, 30, 40]) / 25.0, rel=1e-6)
    assert stats["values"] == [10.0, 30.0, None, 20.0, 40.0]  # per trial, in order
    assert trial_statistics([5.0])["cv"] is None  # one value has no spread
    assert trial_statistics([None, None])["median"] is None


def test_trials_write_each_result_and_a_summary_whose_headline_is_the_median(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A request-count stop: 20 requests a trial (a p95's minimum for `completed`) however loaded the machine.
    spec = tiny_spec(tmp_path, duration="60s", requests=20, trial_pause="100ms")
    assert main(["run", str(spec), "--trials", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    trial_files = sorted((tmp_path / "out").glob("*-trial*.json"))
    summaries = list((tmp_path / "out").glob("*-summary.json"))
    assert [p.name[-11:] for p in trial_files] == ["trial1.json", "trial2.json", "trial3.json"]
    assert len(summaries) == 1 and f"summary: {summaries[0]}" in out
    session_id = summaries[0].name[len("tiny-"):-len("-summary.json")]
    assert all(p.name.startswith(f"tiny-{session_id}-trial") for p in trial_files)
    trials = [json.loads(p.read_text()) for p in trial_files]
    summary = json.loads(summaries[0].read_text())
    assert_valid_result(summary)
    assert [t["run"]["trial"] for t in trials] == [1, 2, 3]
    assert [t["run"]["id"] for t in trials] == [f"{session_id}-t{n}" for n in (1, 2, 3)]
    section = summary["trials"]
    assert (section["requested"], section["count"], section["statistic"]) == (3, 3, "median")
    assert [r["file"] for r in section["runs"]] == [p.name for p in trial_files]
    assert summary["run"]["kind"] == "trials-summary" and summary["run"]["id"] == session_id
    for figure in HEADLINE:
        values = [t["metrics"]["headline"][figure.key] for t in trials]
        if None in values:
            continue
        assert summary["metrics"]["headline"][figure.key] == statistics.median(values)
        assert section["metrics"][figure.key]["values"] == values
        assert (section["metrics"][figure.key]["min"], section["metrics"][figure.key]["max"]) == (min(values),
                                                                                                 max(values))
    assert "headline = median" in out
