"""The ``kvbench`` command line: one module per command, each with ``register(subparsers)``.

Plugins add their own commands through the ``kvbench_cli_commands`` hook (``kvbench
workload`` comes from kvbench-workloads), so the core imports no plugin.

User errors (``kvbench_core.contracts.errors.UserError``) print one clear line on stderr
and exit with their code; a traceback means a kvbench bug.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum: int, _frame: object) -> None:
    """Ctrl-C, SIGTERM, SIGHUP or SIGQUIT while kvbench is still importing: nothing is open yet, so leave at
    once, in one line (the interpreter's own handler would print a KeyboardInterrupt traceback from inside an
    import)."""
    os.write(2, f"kvbench: {interrupted_line(signum)}\n".encode())
    os._exit(128 + signum)


def interrupted_line(signum: int) -> str:
    """The one line a signal costs, the same whenever it lands (start-up, a run, its drain): a signal is not
    an error, so no "error:"; the result's stop reason names it the same way (``signal SIGINT``)."""
    return f"interrupted by {signal.Signals(signum).name}"


# Before anything else is imported: the imports below take most of kvbench's start-up (the errors module
# imports only ``signal``).  A signal the session ignores (SIGINT in a background job, SIGHUP under nohup)
# stays ignored.
from kvbench_core.contracts.errors import STOP_SIGNALS  # noqa: E402

_STARTUP_HANDLERS = {sig: signal.signal(sig, _interrupted_while_starting) for sig in STOP_SIGNALS
                     if signal.getsignal(sig) in (signal.default_int_handler, signal.SIG_DFL)}

import argparse  # noqa: E402 - after the start-up handlers, on purpose
import importlib  # noqa: E402
import threading  # noqa: E402
from typing import Any  # noqa: E402

from kvbench_core import __version__  # noqa: E402
from kvbench_core.cli.renamed import folded, print_notices, renamed_command_line, take_notices  # noqa: E402
from kvbench_core.contracts.errors import UserError  # noqa: E402
from kvbench_core.contracts.plugins import get_plugin_manager  # noqa: E402

#: Command modules under kvbench_core.cli, in the order ``--help`` lists them.
COMMAND_MODULES = [
    "run_cmd",
    "capacity_cmd",
    "forecast_cmd",
    "report_cmd",
    "compare_cmd",
    "export_cmd",
    "check_cmd",
    "spec_cmd",
    "plugins_cmd",
    "models_cmd",
    "project_cmd",
    "replay_cmd",
    "score_cmd",
    "fio_cmd",
    "clean_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvbench",
        description="Storage benchmark for LLM KV-cache offload.",
    )
    parser.add_argument("--version", action="version", version=f"kvbench {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(f"kvbench_core.cli.{module_name}").register(subparsers)
    get_plugin_manager().hook.kvbench_cli_commands(subparsers=subparsers)
    _describe_commands(subparsers)
    return parser


def _describe_commands(subparsers: argparse._SubParsersAction) -> None:
    """Give every command's own ``--help`` the line ``kvbench --help`` lists it with, when it has none."""
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    for name, command in subparsers.choices.items():
        if command.description is None and helps.get(name):
            command.description = helps[name][0].upper() + helps[name][1:] + "."
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        for inner in nested:
            _describe_commands(inner)


class _Terminated(BaseException):
    """SIGTERM, SIGHUP or SIGQUIT before a run installs its own graceful handler (start-up, spec loading):
    leave as Ctrl-C does.

    A ``BaseException``, like ``KeyboardInterrupt``, so no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C before a run installs its own graceful handler: a ``KeyboardInterrupt`` to every ``except`` on
    the way, but not of CPython's exact type.  One of exactly that type leaving an ``exec`` of source text
    (every dataclass and named tuple kvbench's modules define makes its methods so; a Ctrl-C while ``main``
    imports the commands and plugins often lands in one) marks the interpreter as interrupted for good: after
    ``main`` printed its line and returned 130, the process killed itself with SIGINT, so a parent saw 130
    or -2 by where the Ctrl-C happened to land."""


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated(signum)


def _raise_interrupted(_signum: int, _frame: Any) -> None:
    raise _Interrupted


#: What ``main`` turns each signal into until a run installs its graceful handler.
_MAIN_HANDLERS = {sig: _raise_interrupted if sig == signal.SIGINT else _raise_terminated for sig in STOP_SIGNALS}


def _install_main_handlers(restore: dict[int, Any]) -> None:
    """Put ``main``'s handlers in place of the start-up ones (or of the interpreter's, when ``main`` runs
    again in one process), noting in ``restore`` what to put back.  A signal the session ignores stays
    ignored.  ``restore`` is filled before each handler goes in: installing one runs a signal already
    pending, which then raises from here."""
    for sig, handler in _MAIN_HANDLERS.items():
        current = signal.getsignal(sig)
        if current is _interrupted_while_starting:
            current = _STARTUP_HANDLERS[sig]
        elif current not in (signal.default_int_handler, signal.SIG_DFL):
            continue
        restore[sig] = current
        signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    # From here on a signal never ends kvbench in a traceback or a bare kill: one line and 130/143.  The
    # handlers go in inside the ``try``: a signal that arrives as they do is answered like any other.
    restore: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            _install_main_handlers(restore)
        return _main(argv)
    except KeyboardInterrupt:
        print(f"kvbench: {interrupted_line(signal.SIGINT)}", file=sys.stderr)
        return 128 + signal.SIGINT
    except _Terminated as stopped:
        print(f"kvbench: {interrupted_line(stopped.signum)}", file=sys.stderr)
        return 128 + stopped.signum
    finally:
        for sig, previous in restore.items():
            # The process's own entry (argv None) has its exit code: a signal now (a second Ctrl-C) would
            # kill it outright as CPython's shutdown resets handlers to SIG_DFL, so it is ignored.  Called
            # in-process (tests), main puts back the handlers it replaced.
            signal.signal(sig, signal.SIG_IGN if argv is None else previous)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    take_notices()  # what an earlier in-process command left when argparse refused it
    args = parser.parse_args(renamed_command_line(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        code = int(args.handler(args) or 0)
    except UserError as error:
        print(folded(error.line(), take_notices()), file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        return 0
    except OSError as error:  # a file the user named that cannot be read or written: one line, no traceback
        where = f"{error.filename}: " if error.filename else ""
        print(folded(f"kvbench: error: {where}{error.strerror or error}", take_notices()), file=sys.stderr)
        return UserError.exit_code
    notices = take_notices()
    if code == 0:
        print_notices(notices)
    return code


if __name__ == "__main__":
    sys.exit(main())
