"""Entry point of ``kvbench-blktrace`` (group ``kvbench``, name ``block_trace``): the spec's ``tracing`` switch.

``tracing: block`` (or ``{mode: block, required: false, attach_timeout: 120s}``)
starts bpftrace right before the measured window opens and stops it right
after it closes.  A traced run's result gets ``sections.block_trace`` (which
marks the run as traced: tracing perturbs timing, so such runs are kept out
of scoring); a run that asked for tracing but could not have it gets
``sections.block_trace_status`` with the reason, a warning on stderr, and goes
on untraced, unless ``required: true``, which fails it with that reason.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from kvbench_blktrace.parse import TraceOutputError, Value, parse_maps
from kvbench_blktrace.section import build_section
from kvbench_blktrace.tracer import ActiveTrace, TracingUnavailable, bpftrace_version, start_trace
from kvbench_core.contracts.lifecycle import RunView
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.contracts.units import duration_schema, parse_duration
from kvbench_core.contracts.validation import with_defaults

_MODE = {"enum": ["block", "none"], "description": "block: bpftrace block-layer and syscall histograms; none: off"}
#: The long form's fields; their defaults live here once (``tracing_config`` fills them with ``with_defaults``).
_TRACING_OPTIONS: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["mode"], "properties": {
        "mode": _MODE,
        "required": {"type": "boolean", "default": False,
                     "description": "fail the run when tracing is not possible (default: run untraced)"},
        # compiling ~20 probes took 40 s on a busy 2-core VM
        "attach_timeout": {**duration_schema("how long bpftrace may take to compile and attach its probes",
                                             minimum=1), "default": "120s"},
    }}
TRACING_SCHEMA: dict[str, Any] = {
    "description": "block-layer latency tracing around the measured window (needs root and bpftrace)",
    "oneOf": [_MODE, _TRACING_OPTIONS],
}


@dataclass(frozen=True)
class TracingConfig:
    required: bool
    attach_timeout_s: float


def tracing_config(spec: dict[str, Any]) -> TracingConfig | None:
    """The spec's tracing settings; None when tracing is off (absent or ``none``)."""
    value = spec.get("tracing")
    options = with_defaults(_TRACING_OPTIONS, value if isinstance(value, dict) else {"mode": value})
    if options["mode"] != "block":
        return None
    return TracingConfig(required=bool(options["required"]), attach_timeout_s=parse_duration(options["attach_timeout"]))


#: Traces in progress and reasons for untraced runs, per (run id, client index), between the two hooks.
_ACTIVE: dict[tuple[str, int], ActiveTrace] = {}
_UNTRACED: dict[tuple[str, int], str] = {}


def _key(run: RunView) -> tuple[str, int]:
    return (run.run_id, run.client_index)


def _file_paths(run: RunView) -> dict[str, str]:
    """``{tier name: directory}`` for every tier that owns a directory."""
    return {tier.name: tier.directory for tier in run.tiers if tier.directory is not None}


@hookimpl
def kvbench_spec_schema() -> dict[str, Any]:
    return {"tracing": TRACING_SCHEMA}


@hookimpl
def kvbench_measurement_started(run: RunView) -> None:
    config = tracing_config(run.spec)
    if config is None:
        return
    _stop_leftovers()
    try:
        _ACTIVE[_key(run)] = start_trace(os.getpid(), list(_file_paths(run).values()),
                                         attach_timeout_s=config.attach_timeout_s)
    except TracingUnavailable as error:
        _warn_or_fail(config, str(error))
        _UNTRACED[_key(run)] = str(error)


def _stop_leftovers() -> None:
    """A run whose window never closed (it failed mid-window) must not leave its tracer running."""
    while _ACTIVE:
        _, active = _ACTIVE.popitem()
        with contextlib.suppress(TracingUnavailable):  # its own failure no longer matters
            active.process.stop()


def _warn_or_fail(config: TracingConfig, reason: str) -> None:
    if config.required:
        raise TracingUnavailable(f"tracing: block tracing is required but not possible: {reason}")
    print(f"kvbench: warning: running untraced: {reason}", file=sys.stderr)


@hookimpl
def kvbench_measurement_finished(run: RunView) -> dict[str, Any] | None:
    config = tracing_config(run.spec)
    if config is None:
        return None
    active = _ACTIVE.pop(_key(run), None)
    if active is None:
        return _status(_UNTRACED.pop(_key(run), "tracing did not start"))
    try:
        output = active.process.stop()
        maps = parse_maps(output)
    except (TracingUnavailable, TraceOutputError) as error:
        _warn_or_fail(config, str(error))
        return _status(str(error))
    return {"block_trace": _section(run, active, maps)}


def _status(reason: str) -> dict[str, Any]:
    return {"block_trace_status": {"traced": False, "reason": reason}}


def _section(run: RunView, active: ActiveTrace, maps: dict[str, Value]) -> dict[str, Any]:
    paths = _file_paths(run)
    ended = time.time()
    notes = list(active.preflight.notes)
    if active.preflight.devices:
        notes.append("block-layer histograms count every request on the traced disks, "
                     "other processes' included; syscall histograms are this process's only")
    return build_section(
        maps, tool=bpftrace_version(active.preflight.bpftrace), pid=active.pid,
        devices=[{"name": d.name, "dev": d.numbers} for d in active.preflight.devices], paths=paths,
        window={"started_at": active.started_at, "ended_at": ended, "traced_s": round(ended - active.started_at, 3),
                "attach_s": round(active.attach_s, 3)},
        l4=_l4(run, paths), notes=notes)


def _l4(run: RunView, paths: dict[str, str]) -> dict[str, Any]:
    """The run's own L4 host/device split (ms) for the traced tiers, beside the kernel's view."""
    return {tier: {op: dict(layers) for op, layers in run.latency[tier].items()}
            for tier in paths if tier in run.latency}
