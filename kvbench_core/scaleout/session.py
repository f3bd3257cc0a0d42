"""A session runs a spec end to end: its trials, on one process, N local client processes or N MPI
ranks; signal handling; each trial's result file and reports; the trials summary.

Kept apart from the runner so trial/multi-client orchestration and output
formats grow here without the runner knowing them.  Which launcher runs the
clients is decided once: under ``mpirun`` each rank is a client
(``kvbench_core.scaleout.mpi``), else ``clients: N > 1`` starts local processes
(``kvbench_core.scaleout.multiclient``), else the trial is one ``Runner`` here.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import InputFileError, IntegrityError, Interrupted, StorageErrorsCounted, UserError
from kvbench_core.engine.measure.progress import ProgressPrinter
from kvbench_core.engine.run.runner import new_run_id
from kvbench_core.exports.live_metrics import live_metrics
from kvbench_core.filetiers import deleter
from kvbench_core.reports import require_formats, write_reports
from kvbench_core.reports.aggregate import summarize_trials
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.result import write_result
from kvbench_core.results.status import Verdict, allows_exit_zero, worst
from kvbench_core.results.trial import InProcess, Launcher, stop_on_signals
from kvbench_core.runspec.plan import RunPlan


@dataclass
class SessionOutcome:
    results: list[ResultDocument] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    summary: ResultDocument | None = None  # the trials summary (trials > 1)
    summary_path: Path | None = None
    reports: list[Path] = field(default_factory=list)  # xlsx/png written next to the results
    exit_code: int = 0
    error: UserError | None = None
    writer: bool = True  # false on MPI ranks other than 0: they print and write nothing
    save_error: UserError | None = None  # a result that had to go to the temp directory
    exit_zero: bool = False  # a degraded/inconclusive status exits 0: --exit-zero or output.exit_zero asked
    deletions: dict[str, list[str]] = field(default_factory=dict)  # run id -> its file tiers' deletions, a line each


def launcher_for(plan: RunPlan) -> Launcher:
    """MPI ranks when started by mpirun, local processes for ``clients > 1`` or ``workers.processes > 1``, else
    this process."""
    from kvbench_core.scaleout.mpi import detect_world

    comm = detect_world()
    if comm is not None:
        from kvbench_core.scaleout.mpi import MpiRanks

        return MpiRanks(comm, plan)
    if plan.clients > 1 or plan.processes > 1:
        from kvbench_core.scaleout.multiclient import LocalClients

        return LocalClients(plan)
    return InProcess()


def result_path(plan: RunPlan, session_id: str, suffix: str = "") -> Path:
    """``<directory>/<name>-<session id><suffix>.json``; suffix ``-trial<n>`` or ``-summary`` with trials."""
    directory = Path(plan.output.directory).expanduser()
    if not directory.is_absolute():
        directory = Path.cwd() / directory
    return directory / f"{plan.spec.get('name') or 'run'}-{session_id}{suffix}.json"


def run_session(as_written: dict[str, Any], plan: RunPlan, *, quiet: bool = False,
                exit_zero: bool = False) -> SessionOutcome:
    """Run every trial of ``plan``; each trial writes its own result, even when it fails or is stopped.  The
    exit code is the status's (results/status.py); ``exit_zero`` (or ``output.exit_zero``) makes a degraded
    or inconclusive session exit 0."""
    require_formats(list(plan.output.formats))  # a missing reports extra fails now, not after a 300 s run
    launcher = launcher_for(plan)
    outcome = SessionOutcome(writer=launcher.writer)
    received: list[int] = []
    session_id = launcher.agree(new_run_id())
    slot = getattr(launcher, "slot", None)  # the in-process runner, whose telemetry live metrics read
    with stop_on_signals(launcher.stop, received), live_metrics(
            plan.output.metrics, lambda: getattr(slot, "runner", None), str(plan.spec.get("name") or "run")) as live:
        for trial in range(1, plan.trials + 1):
            if not _run_trial(as_written, plan, launcher, session_id, trial,
                              live.watch(_printer(plan, launcher, trial, quiet)), outcome):
                break
            if trial < plan.trials and (launcher.agree_stop(bool(received))
                                        or launcher.agree_stop(_pause(plan.trial_pause_s, received))):
                break
        outcome.deletions = _finish_deletions(outcome)  # still under the handlers: a signal does not cut it short
    if plan.trials > 1 and outcome.results:
        _write_summary(plan, session_id, outcome)
    if received:
        outcome.error = Interrupted(received[0])
    _decide_exit(outcome, plan, exit_zero)
    return outcome


def _printer(plan: RunPlan, launcher: Launcher, trial: int, quiet: bool) -> ProgressPrinter:
    """The trial's progress line: off when quiet or on an MPI rank that does not write."""
    return ProgressPrinter("off" if quiet or not launcher.writer else plan.output.progress,
                           prefix=f"trial {trial}/{plan.trials} " if plan.trials > 1 else "",
                           duration_s=plan.window.duration_s, warmup_s=plan.window.warmup_s,
                           scope=launcher.progress_scope)


def _run_trial(as_written: dict[str, Any], plan: RunPlan, launcher: Launcher, session_id: str, trial: int,
               printer: ProgressPrinter, outcome: SessionOutcome) -> bool:
    """Run trial number ``trial`` and save its result and reports; false when its error ends the session (a
    kvbench bug in this process is raised once the result is saved)."""
    several = plan.trials > 1
    printer.phase("setup")
    run = launcher.run_trial(as_written, plan, run_id=f"{session_id}-t{trial}" if several else session_id,
                             trial=trial, printer=printer)
    document = None if run.result is None else ResultDocument.unchecked(run.result)
    if document is not None and not refused_input(document, run.error):
        printer.phase("results")
        path = result_path(plan, session_id, f"-trial{trial}" if several else "")
        outcome.results.append(document)
        saved = _save(document, path, outcome)
        outcome.paths.append(saved)
        if saved == path:
            outcome.reports += write_reports(document, path, list(plan.output.formats))
    printer.finish()
    if run.crash is not None:
        raise run.crash
    if run.error is not None:
        outcome.error = run.error
        return False
    return True


def _write_summary(plan: RunPlan, session_id: str, outcome: SessionOutcome) -> None:
    """The trials summary (reports/aggregate.py) beside the trials' results, with its reports."""
    outcome.summary = summarize_trials(outcome.results, outcome.paths, session_id=session_id,
                                       requested=plan.trials)
    wanted = result_path(plan, session_id, "-summary")
    outcome.summary_path = _save(outcome.summary, wanted, outcome)
    if outcome.summary_path == wanted:
        outcome.reports += write_reports(outcome.summary, outcome.summary_path, list(plan.output.formats))


def _decide_exit(outcome: SessionOutcome, plan: RunPlan, exit_zero: bool) -> None:
    """The session's error and exit code: the error that stopped it, else a result saved elsewhere, else the
    status of its summary (or of its worst result) when that is not ``completed``; ``exit_zero`` (or
    ``output.exit_zero``) turns a degraded or inconclusive status's code into 0, the error kept as a warning."""
    verdict = outcome.summary.verdict() if outcome.summary else worst(r.verdict() for r in outcome.results)
    said = None
    if not outcome.error:  # where the result went instead says more than its status: the file is elsewhere
        outcome.error = outcome.save_error
    if not outcome.error and verdict is not None:  # the run ended, but may not be "completed": the code says so
        outcome.error = said = status_error(verdict, outcome.results, plan.on_error)
    outcome.exit_code = outcome.error.exit_code if outcome.error else 0
    if said is not None and verdict is not None and allows_exit_zero(verdict.status) \
            and (exit_zero or plan.output.exit_zero):
        outcome.exit_zero, outcome.exit_code = True, 0


def status_error(verdict: Verdict, results: list[ResultDocument], on_error: str = "count") -> UserError | None:
    """The error that says a session's status (its summary's, else its worst result's: results/status.py)
    when it is not ``completed``, in the words of the rule that decided it."""
    if verdict.status == "completed":
        return None
    if verdict.rule == "integrity":
        errors = sum(r.metrics.get("verify", {}).get("integrity_errors", 0) for r in results)
        return IntegrityError(f"{errors} verified reads returned bytes different from what was written")
    counted = counted_storage_errors(results, on_error) if verdict.rule == "failed_requests" else None
    # An ``error`` or ``interrupted`` verdict without the error that stopped it (a rank that was told to stop):
    # still not a success.
    return counted or verdict.error() or UserError(f"the run ended {verdict.status}: {verdict.reason}")


def refused_input(result: ResultDocument, error: UserError | None) -> bool:
    """The run stopped on the user's input (exit 2: a spec rule only the run could check, a missing or
    malformed trace) before its measured window opened: nothing was measured, so it writes no result, as a
    spec error found at load time writes none; the one error line says everything there is to say."""
    measured = result.window.get("measured_s")
    return error is not None and error.exit_code == UserError.exit_code and not measured


def _save(result: ResultDocument, path: Path, outcome: SessionOutcome) -> Path:
    """Write ``result`` to ``path``; when that fails (the output file system filled up during the run, or
    went away), to the temp directory instead, so the measurement is not lost, and remember the error
    for the exit code.  Raises only when neither place takes it."""
    try:
        return write_result(result.to_json(), path)
    except InputFileError as error:
        fallback = Path(tempfile.gettempdir()) / path.name
        try:
            saved = write_result(result.to_json(), fallback)
        except InputFileError:
            raise error from None
        outcome.save_error = outcome.save_error or InputFileError(f"{error}; saved it to {saved} instead")
        return saved


def _finish_deletions(outcome: SessionOutcome) -> dict[str, list[str]]:
    """Wait for the file tiers' entry deletions, which ran while the results were written
    (``filetiers/deleter.py``); a file one could not delete joins its run's result's ``warnings`` (the
    file this session wrote, rewritten; reports already written are not)."""
    lines: dict[str, list[str]] = {}
    for deletion, directory in deleter.finish_all():
        lines.setdefault(deletion.run_id, []).append(
            f"{deletion.label}: deleted {deletion.files} entry files ({deletion.nbytes / 2**30:.2f} GiB) "
            f"in {deletion.seconds:.1f} s, after the result was written")
        warnings = deletion.warnings(directory)
        for index, (result, path) in enumerate(zip(outcome.results, outcome.paths, strict=True)):
            if warnings and result.run.id == deletion.run_id:
                outcome.results[index] = replace(result, warnings=(*result.warnings, *warnings))
                _rewrite(outcome.results[index], path)
    return lines


def _rewrite(result: ResultDocument, path: Path) -> None:
    """Replace the result this session wrote at ``path`` with ``result``, atomically."""
    fresh = path.with_name(f".{path.name}.{os.getpid()}.new")
    write_result(result.to_json(), fresh)
    os.replace(fresh, path)


def counted_storage_errors(results: list[ResultDocument], on_error: str = "count") -> StorageErrorsCounted | None:
    """The error for requests that failed on storage errors without stopping the run.  Says the run's own
    ``on_error`` (issue 19: an ``on_error: stop`` run was reported as ``(on_error: count)``)."""
    failed = sum(r.requests.get("failed", 0) for r in results)
    if not failed:
        return None
    first = next((error for r in results for error in r.errors or ()), None)
    detail = f"; first: tier '{first['tier']}': {first['op']} of '{first['key']}': {first['error']}" if first else ""
    how = "on_error: count" if on_error == "count" else f"on_error: {on_error}, yet the run was not stopped"
    return StorageErrorsCounted(f"{failed} requests failed on storage errors ({how}){detail}")


def _pause(seconds: float, received: list[int]) -> bool:
    """Sleep ``trial_pause`` seconds, cut short by a signal; true when a signal arrived."""
    deadline = time.monotonic() + seconds
    while not received and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return bool(received)
