"""Error types that reach the user as one clear line and a non-zero exit, never a traceback.

Everything a user can cause (a bad spec, a missing file, a server that is down,
a full disk) is a ``UserError``; the CLI prints ``str(error)`` and exits with
``error.exit_code``.  Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal


class UserError(Exception):
    """A problem the user can fix; printed without a traceback.

    Its text is what reaches stderr, the result and the logs, so credentials are masked in it whatever
    the message quotes (a URL with a password, a driver's message echoing a key, a secret's value)."""

    exit_code = 2

    def __str__(self) -> str:
        from kvbench_core.contracts.redact import environment_secrets, redact_text

        return redact_text(super().__str__(), environment_secrets())

    def line(self) -> str:
        """The one line the CLI prints for it."""
        return f"kvbench: error: {self}"


class SpecError(UserError):
    """The run spec (or an override) is invalid; the message names the JSON path."""


class InputFileError(UserError):
    """A trace, model config or manifest is missing or malformed (names file, line, field)."""


class MissingDependency(UserError):
    """An optional heavy dependency is not installed; the message says what to install."""


class ForecastRefused(UserError):
    """``kvbench forecast`` was asked what its fitted model cannot say (a tier it has no measurement of, a
    concurrency far past the measured one); the message names why."""


class BackendUnavailable(UserError):
    """A tier cannot be used on this machine or endpoint (server down, no GPU, no driver)."""

    exit_code = 3


class StorageError(UserError):
    """An I/O operation on a tier failed during the run (disk full, server gone, permission)."""

    exit_code = 4

    def __init__(self, tier: str, op: str, key: str, cause: BaseException | str) -> None:
        self.tier, self.op, self.key = tier, op, key
        self.cause = cause
        super().__init__(f"tier '{tier}': {op} of '{key}' failed: {cause}")


class IntegrityError(UserError):
    """A verified read returned bytes different from what was written (status ``failed``, rule ``integrity``)."""

    exit_code = 5


class RunDegraded(UserError):
    """The run measured to its end but requests failed or found no room (status ``degraded``): the exit code
    says so unless ``--exit-zero`` / ``output.exit_zero`` asked for 0 (kvbench_core/results/status.py)."""

    exit_code = 6


class StorageErrorsCounted(RunDegraded):
    """``on_error: count`` let the run go on past failed storage operations: degraded, and the line names the
    first error."""


class RunInconclusive(UserError):
    """Too few requests completed for the percentiles the result reports (status ``inconclusive``)."""

    exit_code = 7


class InvariantViolated(UserError):
    """One of the result's invariants does not hold: its figures disagree (status ``failed``, rule
    ``invariant``)."""

    exit_code = 8


#: The signals that stop a run as SIGTERM does (a partial result, the cleanup, one line): Ctrl-C, kill, a
#: closed terminal or a dropped ssh session (SIGHUP), and Ctrl-\ (SIGQUIT, which first prints where every
#: thread is, as a long fio job's users expect).  Before, SIGHUP and SIGQUIT killed kvbench outright.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Interrupted(UserError):
    """The run was stopped by one of ``STOP_SIGNALS``; exit code follows the shell convention (128 + n)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        # As the CLI's start-up handler words it (kvbench_core.cli.interrupted_line, which runs before any
        # kvbench module is imported); printed without "error:".
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    def line(self) -> str:
        return f"kvbench: {self}"  # a signal is not an error


class EntryGone(Exception):
    """A tier no longer holds an entry it stored, by a rule of its own: a ``ttl`` that expired, a server's
    eviction under its memory limit.  Not a failure of the tier: that is how such a cache behaves, so the
    cache reads it as a miss, forgets the entry and counts it (``expired_reads``, docs/metrics.md).  A
    backend raises it only where its own rules explain the loss (the Redis tier: with a ``ttl``); an entry
    lost otherwise is an error."""


class Cancelled(Exception):
    """The drain limit ran out and the operation stopped at a command boundary (a source's ``fill``, a sink's
    ``consume``, a tier's command recorder).  Not a user error: the run goes on to its result.  A backend
    that sees it pass through should stop at once and leave slow rollback (deleting a half-written file)
    to ``close``, which runs after the drain, so the cancel ends the drain when it says it does."""
