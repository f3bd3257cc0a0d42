"""Build and write the result JSON (format documented in docs/results.md).

A result restates the experiment: versions, the spec as written and fully
resolved (secrets redacted) with its sha256, the detected environment, the
infrastructure declaration (declared + detected), and the metrics, including
the MLPerf KV-cache v3.0 headline names so published numbers can be compared.
The metrics come from the one model in ``results/metrics.py``, which merged
multi-client and MPI results use too.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvbench_core import __version__
from kvbench_core.codecs.figures import tensor_declaration
from kvbench_core.contracts.percentiles import sample_percentiles
from kvbench_core.contracts.plugins import plugin_versions
from kvbench_core.contracts.redact import environment_secrets, redact
from kvbench_core.engine.cache.cache_figures import reuse_rate
from kvbench_core.engine.measure.opstats import measured_queue_depth
from kvbench_core.engine.run.runner import RunState
from kvbench_core.results.detected_declaration import about_the_run
from kvbench_core.results.document import RESULT_FORMAT, ResultDocument, RunRecord, SpecRecord
from kvbench_core.results.environment import detect_environment
from kvbench_core.results.invariants import run_checks
from kvbench_core.results.metrics import Metrics
from kvbench_core.results.result_schema import VALIDATE_ENV, assert_conforms
from kvbench_core.results.status import decide_result, stamp
from kvbench_core.runspec.declaration import contradictions, detected_system, merge_declaration
from kvbench_core.runspec.jsonfile import temp_beside
from kvbench_core.runspec.loader import spec_sha256


def _stats(values: list[int]) -> dict[str, float | int | None]:
    """Served requests' lengths; percentiles by the nearest rank (docs/metrics.md), so each is a length some
    request had, as ``kvbench workload stats`` reports them (kvbench_workloads.stats.distribution)."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    array = np.asarray(values, dtype=float)
    p50, p90, p99 = sample_percentiles(array, (50, 90, 99))
    return {"count": len(values), "mean": round(float(array.mean()), 2),
            "p50": p50, "p90": p90, "p99": p99, "max": float(array.max())}


def _workload_stats(state: RunState) -> dict[str, Any]:
    counters = state.telemetry.counters
    return {
        "input_length": _stats(state.workload_samples["context"]),
        "generation_length": _stats(state.workload_samples["generate"]),
        "prefix_reuse_rate": reuse_rate(counters),
        "prefix_length": _stats(state.workload_samples["prefix"]),
        "requests_issued": state.requests_issued,
        "requests_served": len(state.workload_samples["context"]),
    }


def _working_set(state: RunState, tiers: dict[str, Any]) -> dict[str, Any] | None:
    """Bytes of the entries stored during the measured window (new entries, not demotion copies) and that
    working set as a multiple of each bounded tier's capacity: > 1 means the tier cannot hold it all."""
    stored = state.telemetry.counters.get("stored_entry_bytes", 0)
    if not stored:
        return None
    return {"stored_bytes": stored,
            "multiple_of_capacity": {name: round(stored / info["capacity_bytes"], 4) for name, info in tiers.items()
                                     if isinstance(info["capacity_bytes"], int) and info["capacity_bytes"] > 0}}


def _cache_state(state: RunState) -> str:
    """warm when the measured window opened on a cache already holding entries (warm-up requests, or the
    decode-only / RAG population); preconditioning conditions the device, its entries are deleted."""
    if state.cache_state:  # detected when the window opened (kvbench_core/engine/cache/cache_figures.py)
        return state.cache_state
    return "warm" if state.plan.window.warmup_s or (state.preload or {}).get("entries") else "cold"


def _detected_declaration(state: RunState, tiers: dict[str, Any], workload: dict[str, Any],
                          describe: dict[str, Any]) -> dict[str, dict[str, Any]]:
    plan = state.plan
    chain = " -> ".join(f"{name} ({info['backend']})" for name, info in tiers.items())
    access = {name: {k: v for k, v in info["describe"].items()
                     if k in ("access_mechanism", "driver_layer", "medium", "queue_depth", "commands_in_flight",
                              "transfer_size", "fs_type", "block_device", "endpoint", "mode")}
              for name, info in tiers.items()}
    model = state.model
    return {
        "tiers": {"topology": chain,
                  "capacities": {name: info["capacity_bytes"] for name, info in tiers.items()},
                  "eviction_policy": "waterfall LRU (target usage {:.0%})".format(
                      plan.eviction["target_usage_ratio"]),
                  "admission_policy": "admit all; entries > {:.0%} of a tier skip to the next".format(
                      plan.eviction["large_entry_limit_ratio"]),
                  "promotion_policy": "none (one-way waterfall)" if plan.promotion == "none"
                  else "promote to top tier on read",
                  "working_set_vs_tier": _working_set(state, tiers),
                  "cache_state": _cache_state(state)},
        "access": {"per_tier": access, "queue_depth": measured_queue_depth(tiers, state.measured_s),
                   "request_concurrency": plan.workload.max_inflight or "unlimited",
                   "scheduler_integration": "synchronous per request (reads before prefill, no preloading)",
                   "preloading": False},
        "tensor": tensor_declaration(tiers, getattr(model, "dtype", None)),
        "workload": {"input_length_mean": workload["input_length"]["mean"],
                     "input_length_p99": workload["input_length"]["p99"],
                     "prefix_reuse_rate": workload["prefix_reuse_rate"],
                     "prefix_length_distribution": workload["prefix_length"] if workload["prefix_length"]["count"]
                     else None,
                     "concurrency": f"{state.users_final} users, max_inflight {plan.workload.max_inflight}",
                     "arrival_process": describe.get("arrival_process") or
                     ("open loop (workload trace timestamps)" if state.source and state.source.open_loop
                      else "closed loop with think time"),
                     "warmup": f"{plan.window.warmup_s:g}s excluded from metrics"},
    }


def spec_section(spec: dict[str, Any], as_written: dict[str, Any]) -> dict[str, Any]:
    """The spec as written and resolved (secrets redacted) with its hash: what re-runs the result."""
    secrets = environment_secrets()
    stored = redact(as_written, secrets)
    # The hash is of the spec as stored, so re-running the result reproduces it.
    return {"as_written": stored,
            "resolved": redact({k: v for k, v in spec.items() if k not in ("spec_dir", "rerun_of")}, secrets),
            "sha256": spec_sha256(stored), "spec_dir": spec.get("spec_dir")}


def rerun_section(spec: dict[str, Any]) -> dict[str, Any]:
    """``{"rerun_of": …}`` when the spec came from a result file (``kvbench run RESULT.json``), else nothing."""
    return {"rerun_of": spec["rerun_of"]} if spec.get("rerun_of") else {}


def build_result(state: RunState, as_written: dict[str, Any], *, trial: int = 1,
                 started_at: float | None = None) -> dict[str, Any]:
    """The complete result document for one run (one trial of one client), built as a ``ResultDocument``
    and stamped with the status the rules give it (results/status.py)."""
    spec = state.spec
    telemetry = state.telemetry
    secrets = environment_secrets()
    metrics = Metrics.from_telemetry(state).to_json() if telemetry else {}
    tiers = metrics.get("tiers", {})
    workload = _workload_stats(state) if telemetry else {}
    describe = redact(state.source.describe(), secrets) if state.source else {}
    environment = _environment(state, tiers, secrets)
    declaration = _declaration(state, tiers, workload, describe, environment, secrets)
    document = ResultDocument(
        format=RESULT_FORMAT, kvbench_version=__version__, plugins=plugin_versions(),
        run=_run_record(state, trial=trial, started_at=started_at, secrets=secrets),
        spec=SpecRecord.from_json(spec_section(spec, as_written)),
        model=state.model.to_dict() if state.model is not None else None, environment=environment,
        # A warning may quote an option (a tier's path): masked like the spec it came from.
        declaration=declaration, warnings=tuple(redact([*state.warnings, *contradictions(declaration)], secrets)),
        workload={"source": describe, "stats": workload, "preload": state.preload,
                  "precondition": state.precondition, "users_final": state.users_final, "arrivals": state.arrivals,
                  "workers": state.worker_count},
        metrics=metrics, timeseries=tuple(telemetry.series if telemetry else ()),
        autoscaling={"trajectory": state.autoscaling, "summary": state.autoscaler_summary},
        sections=redact(state.plugin_sections, secrets),
        errors=tuple(redact(telemetry.errors, secrets) if telemetry else ()), checks={})
    result = document.to_json()
    result["checks"] = run_checks(result)
    verdict = decide_result(result, state.status if state.status in ("failed", "interrupted") else None)
    stamp(result["run"], verdict)
    state.status = verdict.status  # the run's status, decided (results/status.py)
    return result


def _run_record(state: RunState, *, trial: int, started_at: float | None, secrets: Any) -> RunRecord:
    """Which run this is and how it ended; its status is stamped once its invariants are known."""
    return RunRecord(id=state.run_id, name=state.spec.get("name"), status=state.status,
                     stop_reason=redact(state.stop_reason, secrets),
                     error=redact(str(state.error), secrets) if state.error else None, trial=trial,
                     client_index=state.client_index, started_at=started_at, finished_at=time.time(),
                     traced=bool(state.plugin_sections.get("block_trace")),
                     phases_s=state.clock.phases_s(state.measure_start, state.measure_end),
                     rerun_of=rerun_section(state.spec).get("rerun_of"))


def _environment(state: RunState, tiers: dict[str, Any], secrets: Any) -> dict[str, Any]:
    """The detected machine, its file tiers' paths (from the spec) and network tiers' endpoints included."""
    paths = {t.name: t.backend.options[option] for t in state.tiers
             if (option := t.backend.directory_option) and isinstance(t.backend.options.get(option), str)}
    endpoints = {name: info["describe"]["endpoint"] for name, info in tiers.items()
                 if isinstance((info.get("describe") or {}).get("endpoint"), str)}
    return redact(detect_environment(paths, endpoints), secrets)


def _declaration(state: RunState, tiers: dict[str, Any], workload: dict[str, Any], describe: dict[str, Any],
                 environment: dict[str, Any], secrets: Any) -> dict[str, Any]:
    """The declared infrastructure merged with what was detected.  Declared free text (fabric, notes) may
    quote a dashboard URL with its token: masked like the spec."""
    detected = {**(_detected_declaration(state, tiers, workload, describe) if state.telemetry else {}),
                **detected_system(environment)}
    if state.telemetry:  # the network, interfaces and what cannot apply (results/detected_declaration.py)
        found = about_the_run(environment, {name: info["backend"] for name, info in tiers.items()},
                              state.plan.workload.source.name, detected.get("tensor") or {})
        detected.update({section: {**fields, **(detected.get(section) or {})} for section, fields in found.items()})
    return redact(merge_declaration(state.spec.get("declaration") or {}, detected), secrets)


def write_result(result: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write atomically and without clobbering: a private temp file, then a hard link to ``path`` that
    fails when ``path`` exists, so a crash never leaves half a result and no existing file is replaced."""
    from kvbench_core.contracts.errors import InputFileError

    target = Path(path)
    if os.environ.get(VALIDATE_ENV) == "1":
        assert_conforms(result, str(target))
    try:
        with temp_beside(target) as tmp:
            Path(tmp).write_text(json.dumps(result, indent=2, default=_json_default) + "\n")
            _publish(tmp, target)
    except FileExistsError:
        raise InputFileError(f"{target}: already exists; kvbench does not overwrite a result") from None
    except OSError as error:  # the output file system filled up during the run, or went away
        raise InputFileError(f"{target}: cannot write the result: {error.strerror or error}") from None
    return target


def _publish(tmp: str, target: Path) -> None:
    """Give the finished ``tmp`` the name ``target``, raising FileExistsError if that name is taken."""
    try:
        os.link(tmp, target)
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        # No hard links here (vfat, some FUSE mounts): claim the name exclusively, then rename onto the claim.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        os.replace(tmp, target)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer | np.floating):
        return value.item()
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, set | tuple):
        return list(value)
    return str(value)


def read_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    from kvbench_core.contracts.errors import InputFileError

    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputFileError(f"{path}: result file not found") from None
    except json.JSONDecodeError as error:
        raise InputFileError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None
    if not isinstance(data, dict) or "kvbench_result" not in data:
        raise InputFileError(f"{path}: not a kvbench result (no 'kvbench_result' field)")
    return data


def require_sections(result: dict[str, Any], path: str | os.PathLike[str], sections: tuple[str, ...]) -> None:
    """Refuse, in one line, a result that lacks a section a command reads (``{"kvbench_result": 2}`` once
    made ``kvbench report`` end in a KeyError traceback and ``kvbench check`` pass every rule)."""
    from kvbench_core.contracts.errors import InputFileError

    missing = [name for name in sections if not isinstance(result.get(name), dict)]
    if missing:
        raise InputFileError(f"{path}: not a complete kvbench result (no {', '.join(repr(m) for m in missing)} "
                             f"section{'s' if len(missing) > 1 else ''}); it was not written by kvbench run, or "
                             "was cut short")
