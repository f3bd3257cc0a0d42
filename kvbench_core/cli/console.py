"""The rich console kvbench's table-printing commands share."""

from __future__ import annotations

import sys

from rich.console import Console

#: Width used when stdout is a pipe or file, so tables stay whole for grep, less and CI logs.
PIPE_WIDTH = 200


def console() -> Console:
    """A console for stdout: the terminal's width on a terminal, ``PIPE_WIDTH`` otherwise."""
    return Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)
