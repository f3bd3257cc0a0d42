"""A standalone capture (bpftrace's output of the kvbench program traced around any process) as a
result-shaped document, so the core's fio distiller turns a vLLM or llm-d capture into a job too.

The document holds exactly what the distiller reads from a kvbench result: the
``block_trace`` section, one "tier" whose bytes are the traced block bytes, and
the measured window (the program prints how long it was attached).
"""

from __future__ import annotations

import re
from typing import Any

from kvbench_blktrace.parse import parse_maps
from kvbench_blktrace.program import TRACED_MARKER
from kvbench_blktrace.section import build_section

TIER = "traced"
_TRACED = re.compile(rf"^{re.escape(TRACED_MARKER)} (\d+)\s*$", re.MULTILINE)


class CaptureError(ValueError):
    """The text is not a capture the distiller can use."""


def traced_seconds(text: str) -> float | None:
    """How long the probes were attached, from the line the program prints at exit (None: not there)."""
    match = _TRACED.search(text)
    return int(match.group(1)) / 1000 if match else None


def capture_as_result(text: str, *, name: str, directory: str, runtime_s: float | None = None) -> dict[str, Any]:
    """The result-shaped document for ``text`` (the sections a result document is made of, so the fio
    distiller reads it as one: a run no status rule judged, no spec); ``runtime_s`` overrides the traced time."""
    maps = parse_maps(text)
    seconds = runtime_s if runtime_s is not None else traced_seconds(text)
    if seconds is None:
        raise CaptureError(f"the capture does not say how long it ran (no '{TRACED_MARKER}' line): give --runtime")
    section = build_section(
        maps, tool="standalone bpftrace capture", pid=0, devices=[], paths={TIER: directory},
        window={"traced_s": seconds}, l4={},
        notes=["a standalone capture: the block maps count every request on the traced disks"])
    totals = section["totals"]
    if totals["read"]["ios"] + totals["write"]["ios"] == 0:
        raise CaptureError("the capture holds no block read or write requests: nothing to distil "
                           "(was bpftrace stopped with Ctrl-C, after the workload ran?)")
    tier = {"volatile": False, "capacity_bytes": None,
            **{op: {"bytes": totals[op]["bytes"], "ops": totals[op]["ios"], "commands": totals[op]["ios"]}
               for op in ("read", "write")}}
    run = {"id": "standalone-capture", "name": name, "status": "completed", "stop_reason": "the capture ended",
           "error": None, "trial": None, "client_index": None, "started_at": None, "finished_at": 0.0, "traced": True}
    return {"kvbench_result": 2, "run": run, "spec": {"as_written": {}, "resolved": {}, "sha256": ""},
            "metrics": {"tiers": {TIER: tier}, "window": {"measured_s": seconds}},
            "sections": {"block_trace": section}}
