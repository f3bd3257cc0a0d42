"""What kvbench's table-printing commands share: the rich console, and the ``--json OUT`` report ending."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from kvbench_core.runspec.jsonfile import write_json

#: Width used when stdout is a pipe or file, so tables stay whole for grep, less and CI logs.
PIPE_WIDTH = 200


def console() -> Console:
    """A console for stdout: the terminal's width on a terminal, ``PIPE_WIDTH`` otherwise."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)


def set_report_handler(parser: argparse.ArgumentParser, build: Callable[[argparse.Namespace], dict[str, Any]],
                       render: Callable[[dict[str, Any]], int | None], what: str) -> None:
    """Make ``parser`` a report command: ``build(args)`` computes the report, ``--json OUT`` saves it
    whole (``what`` names it in errors) and ``render`` prints it as tables and may return the exit
    status (a report that misses its thresholds)."""
    parser.add_argument("--json", metavar="OUT", help="write the full report as JSON here")

    def handle(args: argparse.Namespace) -> int:
        report = build(args)
        if args.json:
            write_json(args.json, report, what)
        return render(report) or 0

    parser.set_defaults(handler=handle)
