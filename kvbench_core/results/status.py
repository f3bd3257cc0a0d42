"""A run's status and exit code: the rules, in one place (docs/results.md, "Status and exit code").

A status is a figure like any other: a user gates CI and publishes on it, so each one is decided by a rule
a reader can check against the result's own counts.  The rules are tried in order and the first that
applies decides; the status carries the rule's name and a one-line reason, which the summary prints first:

    rule               status        exit   applies when
    error              failed        2-4    an error stopped the run (spec, backend; storage with on_error: stop)
    integrity          failed        5      a verified read returned bytes different from what was written
    interrupted        interrupted   128+n  a signal stopped it (130 for SIGINT, 143 for SIGTERM)
    invariant          failed        8      one of the result's invariants (``checks``) does not hold
    failed_requests    degraded      6      any request failed on a storage error or found no tier with room
    too_few_requests   inconclusive  7      fewer than MIN_REQUESTS_FOR_P95 requests completed in the window
    completed          completed     0      none of the above

The exit codes are the errors' (contracts/errors.py); ``--exit-zero`` / ``output.exit_zero: true`` turn
degraded's and inconclusive's into 0, never failed's or interrupted's.  The functions take plain inputs
(counts, the violated invariants' lines) so that the result builder, the multi-client merge, the trials
summary and ``kvbench check`` decide with the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench_core.contracts.errors import IntegrityError, InvariantViolated, RunDegraded, RunInconclusive, UserError

#: A nearest-rank p95 of n samples is the ceil(0.95 n)-th smallest: below 20 that is the slowest request,
#: so a "p95" of fewer requests is the maximum under another name (docs/metrics.md, percentiles).
MIN_REQUESTS_FOR_P95 = 20
#: The share of failed requests above which a run is degraded: none is tolerated, because a failed request
#: is missing from every latency percentile (the slowest, failing part of the load is the part not counted).
DEGRADED_ABOVE_SHARE = 0.0

STATUSES = ("completed", "inconclusive", "degraded", "interrupted", "failed")
#: What ``--exit-zero`` / ``output.exit_zero: true`` turn into 0: the statuses of a run that ran to its end and
#: measured, but whose figures do not support a conclusion.  A failed or interrupted run keeps its code.
EXIT_ZERO_ALLOWS = ("degraded", "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """A status, the rule that decided it and why, in words a summary's first line can print."""

    status: str
    rule: str
    reason: str

    def error(self) -> UserError | None:
        """The error whose line and exit code say this verdict (contracts/errors.py holds the codes); None for
        ``completed``, and for the ``error`` and ``interrupted`` rules, whose error is the one that stopped
        the run (only the process that ran it holds it)."""
        kind = {"integrity": IntegrityError, "invariant": InvariantViolated, "failed_requests": RunDegraded,
                "too_few_requests": RunInconclusive}.get(self.rule)
        return kind(self.reason) if kind else None


def decide(*, stopped_as: str | None, stop_reason: str, completed: int, failed: int = 0, no_room: int = 0,
           integrity_errors: int = 0, violations: Sequence[str] = ()) -> Verdict:
    """The status of one run (or of a merged multi-client run) from its counts.

    ``stopped_as`` is what the run's stop said (``failed`` for an error, ``interrupted`` for a signal, None
    when it ran to its end); ``completed``/``failed``/``no_room`` are the measured window's requests
    (``metrics.requests``: completed, failed, write_failed); ``violations`` the violated invariants."""
    return (_what_stopped_or_broke(stopped_as, stop_reason, integrity_errors, violations)
            or _lost_requests(completed, failed, no_room)
            or _by_completed(completed, stop_reason))


def _what_stopped_or_broke(stopped_as: str | None, stop_reason: str, integrity_errors: int,
                           violations: Sequence[str]) -> Verdict | None:
    """The rules ``error``, ``integrity``, ``interrupted`` and ``invariant``, in that order: what makes the
    run's figures not a measurement at all, whatever its counts; None when none applies."""
    if stopped_as == "failed":
        return Verdict("failed", "error", stop_reason or "an error stopped the run")
    if integrity_errors:
        return Verdict("failed", "integrity", f"{_count(integrity_errors, 'verified read')} returned bytes "
                                              "different from what was written")
    if stopped_as == "interrupted":
        return Verdict("interrupted", "interrupted", stop_reason or "interrupted")
    if violations:
        more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
        return Verdict("failed", "invariant", f"invariant violated: {violations[0]}{more}")
    return None


def _lost_requests(completed: int, failed: int, no_room: int) -> Verdict | None:
    """The rule ``failed_requests``: a share of lost requests above ``DEGRADED_ABOVE_SHARE`` degrades the run,
    because they are missing from every percentile; None when the share is within it."""
    lost = failed + no_room
    ended = completed + lost
    if not lost or lost / ended <= DEGRADED_ABOVE_SHARE:
        return None
    parts = [f"{failed} failed on storage errors" if failed else "",
             f"{no_room} found no tier with room for their KV" if no_room else ""]
    return Verdict("degraded", "failed_requests",
                   f"{lost} of {_count(ended, 'request')} did not complete: {', '.join(p for p in parts if p)}")


def _by_completed(completed: int, stop_reason: str) -> Verdict:
    """The rules ``too_few_requests`` and ``completed``: enough completed requests for a p95, or not."""
    if completed < MIN_REQUESTS_FOR_P95:
        return Verdict("inconclusive", "too_few_requests",
                       f"{_count(completed, 'request')} completed, a p95 needs {MIN_REQUESTS_FOR_P95}")
    return Verdict("completed", "completed", f"{stop_reason or 'ended'}; {_count(completed, 'request')} completed")


def decide_result(result: Mapping[str, Any], stopped_as: str | None,
                  extra_violations: Sequence[str] = ()) -> Verdict:
    """``decide`` over a result document's own sections, its ``checks`` already computed: what the run and the
    merge write, and what ``kvbench check`` re-derives from a file (with ``recorded_stop``)."""
    metrics = result.get("metrics") or {}
    requests = metrics.get("requests") or {}
    violations = [*((result.get("checks") or {}).get("violations") or []), *extra_violations]
    return decide(stopped_as=stopped_as, stop_reason=(result.get("run") or {}).get("stop_reason") or "",
                  completed=int(requests.get("completed", 0)), failed=int(requests.get("failed", 0)),
                  no_room=int(requests.get("write_failed", 0)),
                  integrity_errors=int((metrics.get("verify") or {}).get("integrity_errors", 0)),
                  violations=violations)


def recorded_stop(run: Mapping[str, Any]) -> str | None:
    """What a result file says stopped its run, for re-deciding its status: ``failed`` by the ``error``
    rule (or a file from before the rules), ``interrupted``, else None (it ran to its end)."""
    if run.get("status") == "failed" and run.get("status_rule", "error") == "error":
        return "failed"
    return "interrupted" if run.get("status") == "interrupted" else None


def stamp(run: dict[str, Any], verdict: Verdict) -> None:
    """Write the verdict into a result's ``run`` section: ``status``, ``status_rule``, ``status_reason``."""
    run.update(status=verdict.status, status_rule=verdict.rule, status_reason=verdict.reason)


def worst(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The verdict that decides a set of runs (the trials of a session): the most severe status, the first
    of that status; ``failed`` > ``interrupted`` > ``degraded`` > ``inconclusive`` > ``completed``."""
    ranked = sorted(enumerate(verdicts), key=lambda item: (-STATUSES.index(item[1].status), item[0]))
    return ranked[0][1] if ranked else None


def verdict_of(run: Mapping[str, Any]) -> Verdict:
    """The verdict a result's ``run`` section records (a result from before the rule fields: its status)."""
    status = str(run.get("status"))
    if status not in STATUSES:  # a file from elsewhere, or edited: no status kvbench defines is a success
        return Verdict("failed", "error", f"status {status!r} is none of {', '.join(STATUSES)}")
    return Verdict(status, str(run.get("status_rule") or status),
                   str(run.get("status_reason") or run.get("stop_reason") or ""))


def trials_verdict(runs: Sequence[Mapping[str, Any]], requested: int) -> Verdict:
    """The status of a trials summary: its worst trial's; a session that ran fewer trials than it asked for
    without one of them failing was interrupted (the trials in between were never run)."""
    decided = worst(verdict_of(run) for run in runs)
    if decided is None:
        return Verdict("failed", "error", "no trial wrote a result")
    if len(runs) < requested and decided.status not in ("failed", "interrupted"):
        return Verdict("interrupted", "interrupted", f"{len(runs)} of {requested} trials ran")
    which = next(index for index, run in enumerate(runs, 1) if verdict_of(run) == decided)
    if decided.status == "completed":
        return Verdict("completed", "completed", f"all {_count(len(runs), 'trial')} completed")
    return Verdict(decided.status, decided.rule, f"trial {which}: {decided.reason}")


def allows_exit_zero(status: str) -> bool:
    """Whether the opt-out (``--exit-zero``, ``output.exit_zero``) gives this status exit 0."""
    return status in EXIT_ZERO_ALLOWS


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
