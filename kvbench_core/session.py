"""A session runs a spec end to end: trials, signal handling, result files, the summary.

Kept apart from the runner so trial/multi-client orchestration and output
formats grow here without the runner knowing them.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench_core.errors import Interrupted, UserError
from kvbench_core.progress import ProgressPrinter
from kvbench_core.results import build_result, write_result
from kvbench_core.runner import Runner


@dataclass
class SessionOutcome:
    results: list[dict[str, Any]] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    exit_code: int = 0
    error: UserError | None = None


@contextmanager
def stop_on_signals(runner_ref: list[Runner], received: list[int]) -> Iterator[None]:
    """SIGINT/SIGTERM stop the current run cleanly (partial result, cleanup) instead of killing it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        received.append(signum)
        for runner in runner_ref:
            runner.request_stop(f"signal {signal.Signals(signum).name}", status="interrupted")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def result_path(spec: dict[str, Any], run_id: str, trial: int, trials: int) -> Path:
    directory = Path(spec["output"]["directory"])
    if not directory.is_absolute():
        directory = Path.cwd() / directory
    name = spec.get("name") or "run"
    suffix = f"-trial{trial}" if trials > 1 else ""
    return directory / f"{name}-{run_id}{suffix}.json"


def run_session(as_written: dict[str, Any], spec: dict[str, Any], *, quiet: bool = False) -> SessionOutcome:
    """Run every trial of ``spec``; each trial writes its own result, even when it fails or is stopped."""
    outcome = SessionOutcome()
    trials = spec["trials"]
    received: list[int] = []
    runners: list[Runner] = []
    with stop_on_signals(runners, received):
        for trial in range(1, trials + 1):
            printer = ProgressPrinter("off" if quiet else spec["output"]["progress"],
                                      prefix=f"trial {trial}/{trials} " if trials > 1 else "")
            runner = Runner(spec, on_progress=printer)
            runners[:] = [runner]
            started = time.time()
            state = runner.run()
            printer.finish()
            result = build_result(state, as_written, trial=trial, started_at=started)
            path = write_result(result, result_path(spec, state.run_id, trial, trials))
            outcome.results.append(result)
            outcome.paths.append(path)
            if state.crash is not None:
                raise state.crash
            if state.error is not None:
                outcome.error = state.error
                outcome.exit_code = state.error.exit_code
                break
            if received:
                break
            if trial < trials and spec.get("trial_pause"):
                time.sleep(spec["trial_pause"])
    if received:
        outcome.error = Interrupted(received[0])
        outcome.exit_code = outcome.error.exit_code
    if spec["verify"] and not outcome.error:
        errors = sum(r["metrics"].get("verify", {}).get("integrity_errors", 0) for r in outcome.results if r["metrics"])
        if errors:
            from kvbench_core.errors import IntegrityError

            outcome.error = IntegrityError(f"{errors} verified reads returned bytes different from what was written")
            outcome.exit_code = outcome.error.exit_code
    return outcome
