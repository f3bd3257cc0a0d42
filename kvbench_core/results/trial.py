"""One trial of one client in this process, and what a launcher hands back to the session.

The session (trials, result files, reports) does not care whether a trial ran
as one ``Runner`` here, as N local client processes or as N MPI ranks; each
launcher returns a ``TrialRun``.  ``run_once`` is the piece all three share:
run a ``Runner`` and build its result.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from kvbench_core.contracts.errors import STOP_SIGNALS, UserError
from kvbench_core.engine.measure.progress import ProgressPrinter, ProgressScope
from kvbench_core.engine.run.runner import Runner, RunState
from kvbench_core.results.result import build_result
from kvbench_core.runspec.plan import RunPlan


@dataclass
class TrialRun:
    """One trial as this process saw it.  ``result`` is None on MPI ranks other than 0 (rank 0 writes)."""

    result: dict[str, Any] | None
    error: UserError | None = None
    crash: BaseException | None = None  # a kvbench bug in this process: re-raised once the result is saved


class Launcher(Protocol):
    """How a trial's clients run: in this process, as local processes, or as MPI ranks."""

    #: Whether this process writes results and prints the summary (false on MPI ranks other than 0).
    writer: bool
    #: Whose figures this process's progress lines show (the session's printer is made with it).
    progress_scope: ProgressScope

    def agree(self, run_id: str) -> str:
        """The run id every client of the session uses (MPI: rank 0's)."""

    def agree_stop(self, stop: bool) -> bool:
        """Whether to stop between trials; every process must take the same decision."""

    def run_trial(self, as_written: dict[str, Any], plan: RunPlan, *, run_id: str, trial: int,
                  printer: ProgressPrinter) -> TrialRun:
        """Run one trial and return it (merged over the clients where there are several)."""

    def stop(self, reason: str) -> None:
        """Stop the trial in progress cleanly (a signal arrived)."""


def run_once(plan: RunPlan, as_written: dict[str, Any], slot: RunnerSlot, *, run_id: str,
             trial: int, client_index: int = 0, on_progress: Callable[[dict[str, Any]], None] | None = None,
             barrier: Callable[[], None] | None = None) -> tuple[dict[str, Any], RunState]:
    """Run ``plan`` once with a ``Runner`` (published in ``slot``, so stops reach it) and build its result."""
    runner = Runner(plan, run_id=run_id, client_index=client_index, on_progress=on_progress, barrier=barrier)
    slot.publish(runner)
    started = time.time()
    state = runner.run()
    return build_result(state, as_written, trial=trial, started_at=started), state


class RunnerSlot:
    """Where stops find the trial's runner: a signal or a coordinator's stop may come at any moment, also
    before the runner is built, and is then applied as soon as it is published (one came in between once
    and was lost: the run went on to its end and said "completed").  No lock: a signal's handler may run
    on the thread inside ``publish``.  ``stop`` records before it looks for the runner and ``publish``
    sets the runner before it looks at the records, so at least one of them applies each stop (both may:
    a second request changes nothing)."""

    def __init__(self) -> None:
        self.runner: Runner | None = None
        self.reasons: list[str] = []

    def publish(self, runner: Runner) -> None:
        self.runner = runner
        if self.reasons:
            runner.request_stop(self.reasons[0], status="interrupted")

    def stop(self, reason: str) -> None:
        self.reasons.append(reason)
        if self.runner is not None:
            self.runner.request_stop(reason, status="interrupted")

    @property
    def stopped(self) -> bool:
        return bool(self.reasons) or (self.runner is not None and self.runner.stopped)


#: The signal that gives up on a graceful stop.  The first stops the run and waits for the operations in
#: flight (the result, the cleanup); a second is patience lost, not a reason to skip the cleanup.  But an
#: operation in flight may hang for as long as its server lets it (issue 19: a run stopping behind S3
#: uploads ignored SIGINT and SIGTERM for 830 s, until SIGKILL), so the third leaves at once.
ABANDON_AFTER_SIGNALS = 3


def abandon(signum: int) -> None:
    """Leave now, without waiting for operations in flight: what a file tier leaves behind is removed by
    the next run on its directory (the run's lock is gone with the process)."""
    import os

    os.write(2, b"kvbench: stopping did not finish (operations still in flight); left at once, "
                b"without the result or the cleanup\n")
    os._exit(128 + signum)


@contextmanager
def stop_on_signals(on_signal: Callable[[str], None], received: list[int]) -> Iterator[None]:
    """Every one of ``STOP_SIGNALS`` stops the current run cleanly (partial result, cleanup) instead of
    killing it; SIGQUIT first prints every thread's stack (where each worker is: a hung tier shows)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        if signum == signal.SIGQUIT:
            dump_threads()
        received.append(signum)
        if len(received) >= ABANDON_AFTER_SIGNALS:
            abandon(signum)
        on_signal(f"signal {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def dump_threads() -> None:
    """Every thread's Python stack on stderr, under one line saying why (``faulthandler``: safe from a
    signal handler, and it shows a thread stuck inside a C call too)."""
    sys.stderr.write("kvbench: SIGQUIT: the stack of every thread follows; then the run stops as for SIGTERM\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


class InProcess:
    """The default: the trial is one ``Runner`` in this process."""

    writer = True
    progress_scope = ProgressScope()

    def __init__(self) -> None:
        self.slot = RunnerSlot()

    def agree(self, run_id: str) -> str:
        return run_id

    def agree_stop(self, stop: bool) -> bool:
        return stop

    def run_trial(self, as_written: dict[str, Any], plan: RunPlan, *, run_id: str, trial: int,
                  printer: ProgressPrinter) -> TrialRun:
        result, state = run_once(plan, as_written, self.slot, run_id=run_id, trial=trial, on_progress=printer)
        printer.finish()
        return TrialRun(result, error=state.error, crash=state.crash)

    def stop(self, reason: str) -> None:
        self.slot.stop(reason)
