"""The words that say which rule decided a result's status: one function, so that the terminal summary's
first line, the HTML report and the workbook say the same thing (results/status.py holds the rules)."""

from __future__ import annotations

from kvbench_core.results.document import ResultDocument


def has_figures(document: ResultDocument) -> bool:
    """Whether the result measured anything: a run that failed before its window opened has no figures, and
    its cause is its error line (a block of zeros and the cause twice would read as a result)."""
    return bool(document.window.get("measured_s")) or not document.run.error


def status_reason(document: ResultDocument) -> str:
    """The rule that decided the status, in words (results/status.py); a result from before the rules: its
    stop; a run stopped before its window opened: that."""
    run = document.run
    if not has_figures(document):
        return "before the measured window opened"
    return run.status_reason or run.stop_reason


def failed_invariants(document: ResultDocument) -> list[str]:
    """The result's violated invariants (``checks.violations``), each as its line."""
    return [str(line) for line in (document.checks or {}).get("violations") or []]
