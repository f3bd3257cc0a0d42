"""What ``kvbench check``'s rules judge: the checked document and every trial, read and verified.

A summary's numbers are never trusted: each trial's result file is read from
beside the summary, its sha256 verified against the one the session recorded
and its spec hash recomputed, before a rule (reports/rules.py) looks at it.
A single run is its own only trial.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.results.document import ResultDocument, TrialsSection
from kvbench_core.results.rederive import IncompleteResult, rederived_metrics


@dataclass
class Evidence:
    """The checked document, and every trial as read and verified from its file.  ``problems`` are trial
    files that could not be trusted (named, so the "trial files verified" rule can say why)."""

    result: ResultDocument
    trials: list[ResultDocument] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def summary(self) -> bool:
        return self.result.is_summary

    @property
    def trials_section(self) -> TrialsSection:
        """A summary's ``trials`` (only asked of a summary)."""
        assert self.result.trials is not None
        return self.result.trials

    def specs(self) -> list[dict[str, Any]]:
        """The resolved spec of every trial (of the document itself when no trial could be read)."""
        return [dict(t.spec.resolved) for t in self.trials] or [dict(self.result.spec.resolved)]

    def completed(self) -> list[ResultDocument]:
        """The trials that completed and measured: what a summary's statistics are over."""
        return [t for t in self.trials if t.run.status == "completed" and t.metrics]

    def label(self, trial: ResultDocument) -> str:
        """``trial 2: `` before a trial's line in a summary's reason; nothing for a single result."""
        return f"trial {trial.run.trial}: " if self.summary else ""


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def gather(result: ResultDocument, directory: str | Path | None) -> Evidence:
    """Read and verify the trial files a summary names (``directory``: where the summary lives)."""
    evidence = Evidence(result)
    if result.trials is None:
        evidence.trials = [result]
        return evidence
    for run in result.trials.runs:
        label = f"trial {run.trial} ({run.file})"
        path = Path(directory or ".") / Path(run.file).name
        problem = _untrusted(path, run.sha256)
        if problem is None:
            try:
                trial = ResultDocument.unchecked(json.loads(path.read_text()), path)
            except (InputFileError, json.JSONDecodeError, UnicodeDecodeError) as error:
                problem = f"not a kvbench result ({error})"
            else:
                problem = _spec_problem(trial, result.spec.sha256)
        if problem:
            evidence.problems.append(f"{label}: {problem}")
        else:
            evidence.trials.append(trial)
    return evidence


def _untrusted(path: Path, recorded: str | None) -> str | None:
    if not path.is_file():
        return "file not found next to the summary"
    if not recorded:
        return "the summary records no sha256 for it"
    if _file_sha256(path) != recorded:
        return "sha256 differs from the summary's record (the file was edited)"
    return None


def _spec_problem(trial: ResultDocument, summary_hash: str) -> str | None:
    if not trial.spec.verifies():
        return "its spec does not hash to its recorded spec sha256"
    if trial.spec.sha256 != summary_hash:
        return "ran another spec than the summary's"
    return None


def rederived_headline(trial: ResultDocument) -> dict[str, Any]:
    """The trial's headline recomputed from its raw material by the run's formulas (never read back); empty
    for a trial that measured nothing or whose raw material is incomplete (the figures rule names that)."""
    try:
        return dict((rederived_metrics(trial.to_json()) or {}).get("headline") or {})
    except IncompleteResult:
        return {}
