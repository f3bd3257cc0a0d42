"""Every kvbench hook, in one screen.  Plugins implement them with ``@hookimpl`` (``kvbench_core.contracts.plugins``).

Providers return a mapping ``{name: class}``; the class carries its own ``options_schema`` (a JSON Schema
fragment) that the core composes into the run-spec schema, so a typo in a plugin's option is refused with
its path before any byte is written.  A name two distributions provide is refused naming both.  Lifecycle
hooks let plugins (block tracing, say) act around the measured window without the runner knowing them.

Every type a hook takes or returns is public in ``kvbench_core.contracts``: a plugin needs nothing else.
The reference with an example per hook is docs/plugin-hooks.md.
"""

from __future__ import annotations

import argparse
from typing import Any

import pluggy

from kvbench_core.contracts.autoscaler import Autoscaler
from kvbench_core.contracts.backend import StorageBackend
from kvbench_core.contracts.codec import Codec
from kvbench_core.contracts.lifecycle import RunView
from kvbench_core.contracts.workload import WorkloadSource

hookspec = pluggy.HookspecMarker("kvbench")


@hookspec
def kvbench_storage_backends() -> dict[str, type[StorageBackend]]:
    """Storage tiers this plugin provides, ``{backend name: class}``: the name a spec's
    ``cache.tiers[i].backend`` selects.  Called once per process, when the registry first loads."""


@hookspec
def kvbench_workload_sources() -> dict[str, type[WorkloadSource]]:
    """Workload sources this plugin provides, ``{source name: class}``: the name ``workload.source``
    selects."""


@hookspec
def kvbench_autoscalers() -> dict[str, type[Autoscaler]]:
    """Autoscalers this plugin provides, ``{autoscaler name: class}``: the name ``autoscaler.name``
    selects."""


@hookspec
def kvbench_codecs() -> dict[str, type[Codec]]:
    """KV codecs this plugin provides, ``{codec name: class}``: the name a tier's ``codec`` selects."""


@hookspec
def kvbench_spec_schema() -> dict[str, Any]:
    """Extra top-level run-spec properties this plugin reads, ``{property: JSON Schema fragment}``
    (e.g. ``{"tracing": {...}}``); the plugin reads them back from ``RunView.spec``."""


@hookspec
def kvbench_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add this plugin's ``kvbench`` subcommands to ``subparsers`` (the CLI's ``add_subparsers()``):
    ``subparsers.add_parser(name, ...)`` with ``set_defaults(handler=function)``; the handler takes the
    parsed ``argparse.Namespace`` and returns the exit code."""


@hookspec
def kvbench_measurement_started(run: RunView) -> None:
    """Called right before the measured window opens (after warm-up and preconditioning), in every client.
    The window opens when the hook returns; raising ``UserError`` fails the run with that message."""


@hookspec
def kvbench_measurement_finished(run: RunView) -> dict[str, Any] | None:
    """Called right after the measured window closes, with ``run.latency`` filled; a returned
    ``{section: value}`` becomes a section of the result (JSON-serialisable values only)."""
