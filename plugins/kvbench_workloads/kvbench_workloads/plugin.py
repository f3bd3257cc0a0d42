"""Registers the trace sources and the ``kvbench workload`` command under the ``kvbench`` entry-point group.

Classes are imported inside the hooks, as in the core's built-ins, so listing plugins stays cheap.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_workload_sources() -> dict[str, type]:
    from kvbench_workloads.catalog import sources

    return sources()


@hookimpl
def kvbench_cli_commands(subparsers: Any) -> None:
    from kvbench_workloads import command

    command.register(subparsers)
