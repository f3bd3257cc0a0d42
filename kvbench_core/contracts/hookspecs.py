"""Every kvbench hook, in one screen.  Plugins implement them with ``@hookimpl`` (``kvbench_core.contracts.plugins``).

Providers return a mapping ``{name: class}``; the class carries its own
``options_schema`` (a JSON Schema fragment) that the core composes into the
run-spec schema.  Lifecycle hooks let plugins (block tracing, say) act around
the measured window without the runner knowing them.
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("kvbench")


@hookspec
def kvbench_storage_backends() -> dict[str, type]:
    """Storage tiers this plugin provides: ``{backend name: StorageBackend subclass}``."""


@hookspec
def kvbench_workload_sources() -> dict[str, type]:
    """Workload sources this plugin provides: ``{source name: WorkloadSource subclass}``."""


@hookspec
def kvbench_autoscalers() -> dict[str, type]:
    """Autoscalers this plugin provides: ``{autoscaler name: Autoscaler subclass}``."""


@hookspec
def kvbench_codecs() -> dict[str, type]:
    """KV codecs this plugin provides: ``{codec name: kvbench_core.codecs.contract.Codec subclass}``."""


@hookspec
def kvbench_spec_schema() -> dict[str, Any]:
    """Extra top-level run-spec properties this plugin reads (e.g. ``{"tracing": {...}}``)."""


@hookspec
def kvbench_cli_commands(subparsers: Any) -> None:
    """Add this plugin's ``kvbench`` subcommands: ``subparsers.add_parser(...)``, with ``handler`` as default."""


@hookspec
def kvbench_measurement_started(run: Any) -> None:
    """Called right before the measured window opens (after warm-up and preconditioning).
    ``run`` is a frozen ``kvbench_core.engine.run_state.RunView``."""


@hookspec
def kvbench_measurement_finished(run: Any) -> dict[str, Any] | None:
    """Called right after the measured window closes; a returned dict becomes a result section."""
