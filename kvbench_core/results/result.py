"""Build and write the result JSON (format documented in docs/results.md).

A result restates the experiment: versions, the spec as written and fully
resolved (secrets redacted) with its sha256, the detected environment, the
infrastructure declaration (declared + detected), and the metrics, including
the MLPerf KV-cache v3.0 headline names so published numbers can be compared.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvbench_core import __version__
from kvbench_core.codecs.figures import tensor_declaration, tier_codec
from kvbench_core.contracts.plugins import plugin_versions
from kvbench_core.contracts.workload import DEFAULT_QOS, QoSClass
from kvbench_core.engine.cache_figures import reuse_rate
from kvbench_core.engine.histogram import LatencyHistogram
from kvbench_core.engine.opstats import measured_queue_depth
from kvbench_core.engine.runner import RunState
from kvbench_core.engine.setup import qos_classes
from kvbench_core.results.checks import run_checks
from kvbench_core.results.environment import detect_environment
from kvbench_core.results.schema import VALIDATE_ENV, assert_conforms
from kvbench_core.spec.declaration import contradictions, detected_system, merge_declaration
from kvbench_core.spec.loader import spec_sha256
from kvbench_core.spec.redact import environment_secrets, redact

#: The result format; bumped whenever the schema (kvbench_core/schemas/result.schema.json) changes.
RESULT_FORMAT = 2
GB = 1e9


def _stats(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    array = np.asarray(values, dtype=float)
    return {"count": len(values), "mean": round(float(array.mean()), 2),
            "p50": float(np.percentile(array, 50)), "p90": float(np.percentile(array, 90)),
            "p99": float(np.percentile(array, 99)), "max": float(array.max())}


def _tier_metrics(state: RunState) -> dict[str, Any]:
    telemetry = state.telemetry
    out: dict[str, Any] = {}
    for tier in state.tiers:
        ops = telemetry.tiers[tier.name]
        out[tier.name] = {
            "backend": tier.backend.name,
            "capacity_bytes": None if math.isinf(tier.capacity) else int(tier.capacity),
            "volatile": tier.backend.volatile,
            "describe": redact(tier.description or {"backend": tier.backend.name}, environment_secrets()),
            "read": ops["read"].to_dict(),
            "write": ops["write"].to_dict(),
            "reads_served": telemetry.read_hits.get(tier.name, 0),
        }
        out[tier.name]["codec"] = tier_codec(out[tier.name])
        counters = getattr(tier.backend, "counters", None)
        if callable(counters):
            out[tier.name]["counters"] = counters()
    return out


def persistent_tier(tiers: dict[str, Any]) -> str | None:
    """The first non-volatile tier: what MLPerf's ``nvme_*`` metrics refer to."""
    for name, tier in tiers.items():
        if not tier["volatile"]:
            return name
    return None


def headline(metrics: dict[str, Any], bytes_per_token: int) -> dict[str, Any]:
    """The MLPerf KV-cache v3.0 headline, computed from the other metric sections.

    Works on dicts, not on live telemetry, so a merged multi-client result gets
    its headline from the merged sections by the very same formulas.
    """
    requests, tiers, cache = metrics["requests"], metrics["tiers"], metrics["cache"]
    window_s = metrics["window"]["measured_s"]
    storage_s = metrics["histograms"]["storage"]["total"]
    generated = requests["generated_tokens"]
    served = cache["reads_served_by_tier"]
    reads_total = sum(served.values()) + cache["read_misses"]
    fast_reads = sum(n for name, n in served.items() if tiers.get(name, {}).get("volatile"))
    persistent = persistent_tier(tiers)

    def device_p95(op: str) -> float | None:
        return tiers[persistent][op]["latency_ms"]["device"]["p95"] if persistent else None

    moved = sum(tier[op]["bytes"] for tier in tiers.values() for op in ("read", "write"))
    if not moved:  # a run that moved no bytes has no storage throughput, whatever its requests said
        window_s = storage_s = 0.0
    return {
        "decode_bytes_read_gb": round(requests["decode_tokens_read"] * bytes_per_token / GB, 6),
        "avg_throughput_tokens_per_sec": round(generated / window_s, 3) if window_s > 0 else None,
        "storage_throughput_tokens_per_sec": round(generated / storage_s, 3) if storage_s > 0 else None,
        "nvme_read_device_p95_ms": device_p95("read"),
        "nvme_write_device_p95_ms": device_p95("write"),
        "end_to_end_latency_p95_ms": metrics["latency_ms"]["end_to_end"]["p95"],
        "cache_hit_rate": round(fast_reads / reads_total, 6) if reads_total else None,
        "requests_completed": requests["completed"],
        "persistent_tier": persistent,
    }


def qos_section(e2e: dict[str, LatencyHistogram], service: dict[str, LatencyHistogram],
                classes: dict[str, QoSClass] | None = None) -> dict[str, Any]:
    """Per QoS class: end-to-end and service latency, the SLA judged on service latency (enqueued until the
    storage work is done; generation pacing is simulated GPU time no storage can shorten).  From
    histograms, so merged results reuse it.  ``classes``: the run's targets (the spec's ``qos``)."""
    out = {}
    classes = classes or DEFAULT_QOS
    for name, hist in e2e.items():
        summary = service[name].summary()
        target = classes[name]
        p95, p99 = summary["p95"], summary["p99"]
        out[name] = {
            "requests": hist.count, "latency_ms": hist.summary(), "service_latency_ms": summary,
            "sla_p95_ms": target.p95_target_s * 1000, "sla_p99_ms": target.p99_target_s * 1000,
            "priority": target.priority,
            "sla_met": None if p95 is None else bool(p95 <= target.p95_target_s * 1000
                                                     and p99 <= target.p99_target_s * 1000),
        }
    return out


def hit_rates(counters: dict[str, int]) -> dict[str, float | None]:
    """Prefix and multi-turn hit rates from the cache counters."""
    prefix_reads = counters.get("prefix_reads", 0)
    turn_reads = counters.get("turn_reads", 0)
    return {"prefix_hit_rate": round(counters.get("prefix_hits", 0) / prefix_reads, 6) if prefix_reads else None,
            "multi_turn_hit_rate": round(counters.get("turn_hits", 0) / turn_reads, 6) if turn_reads else None}


def _cache_stats(state: RunState) -> dict[str, Any]:
    telemetry = state.telemetry
    counters = dict(telemetry.counters)
    return {
        "reads_served_by_tier": dict(telemetry.read_hits),
        "read_misses": telemetry.read_misses,
        "demotions_bytes": dict(telemetry.demotions),
        "demotions_count": dict(telemetry.demotion_count),
        "evictions_deleted": telemetry.evictions_deleted,
        "promotions": telemetry.promotions,
        "system_prompt_reuse": counters.get("prefix_reads", 0),
        "system_prompt_hits": counters.get("prefix_hits", 0),
        **hit_rates(counters),
        "rag_chunk_reads": counters.get("rag_reads", 0),
        "counters": counters,
        "occupancy_at_end": {name: {"entries": o["entries"], "bytes": o["bytes"]}  # read before cleanup
                             for name, o in state.occupancy_at_end.items()},
    }


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


def _cache_state(state: RunState, spec: dict[str, Any]) -> str:
    """warm when the measured window opened on a cache already holding entries (warm-up requests, or the
    decode-only / RAG population); preconditioning conditions the device, its entries are deleted."""
    if state.cache_state:  # detected when the window opened (kvbench_core/engine/cache_state.py)
        return state.cache_state
    return "warm" if spec.get("warmup") or (state.preload or {}).get("entries") else "cold"


def _detected_declaration(state: RunState, spec: dict[str, Any], tiers: dict[str, Any],
                          workload: dict[str, Any], describe: dict[str, Any]) -> dict[str, dict[str, Any]]:
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
                      spec["cache"]["eviction"]["target_usage_ratio"]),
                  "admission_policy": "admit all; entries > {:.0%} of a tier skip to the next".format(
                      spec["cache"]["eviction"]["large_entry_limit_ratio"]),
                  "promotion_policy": "none (one-way waterfall)" if spec["cache"]["promotion"] == "none"
                  else "promote to top tier on read",
                  "working_set_vs_tier": _working_set(state, tiers),
                  "cache_state": _cache_state(state, spec)},
        "access": {"per_tier": access, "queue_depth": measured_queue_depth(tiers, state.measured_s),
                   "request_concurrency": spec["workload"]["max_inflight"] or "unlimited",
                   "scheduler_integration": "synchronous per request (reads before prefill, no preloading)",
                   "preloading": False},
        "tensor": tensor_declaration(tiers, getattr(model, "dtype", None)),
        "workload": {"input_length_mean": workload["input_length"]["mean"],
                     "input_length_p99": workload["input_length"]["p99"],
                     "prefix_reuse_rate": workload["prefix_reuse_rate"],
                     "prefix_length_distribution": workload["prefix_length"] if workload["prefix_length"]["count"]
                     else None,
                     "concurrency": f"{state.users_final} users, max_inflight {spec['workload']['max_inflight']}",
                     "arrival_process": describe.get("arrival_process") or
                     ("open loop (trace timestamps)" if state.source and state.source.open_loop
                      else "closed loop with think time"),
                     "warmup": f"{spec.get('warmup') or 0:g}s excluded from metrics"},
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
    """The complete result document for one run (one trial of one client)."""
    spec = state.spec
    telemetry = state.telemetry
    secrets = environment_secrets()
    window_s = ((state.measure_end or 0) - (state.measure_start or 0)) if state.measure_start else 0.0
    io_window = telemetry.io_window() if telemetry else None
    tiers = _tier_metrics(state) if telemetry else {}
    workload = _workload_stats(state) if telemetry else {}
    describe = redact(state.source.describe(), secrets) if state.source else {}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    moved = sum(t["read"]["bytes"] + t["write"]["bytes"] for t in tiers.values())
    cpu_s = usage.ru_utime + usage.ru_stime
    paths = {t.name: t.backend.options["path"] for t in state.tiers if isinstance(t.backend.options.get("path"), str)}
    metrics: dict[str, Any] = {}
    if telemetry:
        metrics = {
            "window": {"measured_s": round(window_s, 6),
                       "io_active_s": round(io_window[1] - io_window[0], 6) if io_window else None,
                       "started_at": state.measure_start_wall, "ended_at": state.measure_end_wall,
                       "monotonic_start": state.measure_start},
            "requests": {"completed": telemetry.requests, "failed": telemetry.requests_failed,
                         "write_failed": telemetry.requests_write_failed,
                         "unfinished": state.unfinished_requests, "context_tokens": telemetry.context_tokens,
                         "generated_tokens": telemetry.generated_tokens,
                         "decode_tokens_read": telemetry.decode_tokens_read},
            "latency_ms": {"end_to_end": telemetry.e2e_all.summary(), "queue_wait": telemetry.queue_wait.summary(),
                           "storage": telemetry.storage.summary()},
            "histograms": {"end_to_end": telemetry.e2e_all.to_dict(), "queue_wait": telemetry.queue_wait.to_dict(),
                           "storage": telemetry.storage.to_dict(),
                           "end_to_end_by_qos": {q: h.to_dict() for q, h in telemetry.e2e.items()},
                           "service_by_qos": {q: h.to_dict() for q, h in telemetry.service.items()}},
            "qos": qos_section(telemetry.e2e, telemetry.service, qos_classes(spec)),
            "tiers": tiers,
            "cache": _cache_stats(state),
            "drain": state.drain,
            "verify": {"enabled": spec["verify"], "bytes_verified": telemetry.verified_bytes,
                       "seconds": round(telemetry.verify_seconds, 6),
                       "integrity_errors": telemetry.counters.get("integrity_errors", 0),
                       "mismatches": telemetry.integrity_errors},
            "cpu": {"process_cpu_s": round(cpu_s, 3), "peak_rss_bytes": usage.ru_maxrss * 1024,
                    "cpu_s_per_gb_moved": round(cpu_s / (moved / GB), 4) if moved else None,
                    "host_share_of_tier_time": host_share(tiers)},
        }
        metrics = {"headline": headline(metrics, state.bytes_per_token), **metrics}
    # Declared free text (fabric, notes) may quote a dashboard URL with its token: masked like the spec.
    environment = redact(detect_environment(paths), secrets)  # tier paths come from the spec
    detected = {**(_detected_declaration(state, spec, tiers, workload, describe) if telemetry else {}),
                **detected_system(environment)}
    declaration = redact(merge_declaration(spec.get("declaration") or {}, detected), secrets)
    result = {
        "kvbench_result": RESULT_FORMAT,
        "kvbench_version": __version__,
        "plugins": plugin_versions(),
        "run": {"id": state.run_id, "name": spec.get("name"), "status": state.status,
                "stop_reason": redact(state.stop_reason, secrets),
                "error": redact(str(state.error), secrets) if state.error else None,
                "trial": trial, "client_index": state.client_index,
                "started_at": started_at, "finished_at": time.time(),
                "traced": bool(state.plugin_sections.get("block_trace")),
                **rerun_section(spec)},
        "spec": spec_section(spec, as_written),
        "model": state.model.to_dict() if state.model is not None else None,
        "environment": environment,
        "declaration": declaration,
        "warnings": contradictions(declaration),
        "workload": {"source": describe, "stats": workload, "preload": state.preload,
                     "precondition": state.precondition, "users_final": state.users_final,
                     "arrivals": state.arrivals,
                     "workers": state.worker_count},
        "metrics": metrics,
        "timeseries": telemetry.series if telemetry else [],
        "autoscaling": {"trajectory": state.autoscaling, "summary": state.autoscaler_summary},
        "sections": redact(state.plugin_sections, secrets),
        "errors": redact(telemetry.errors, secrets) if telemetry else [],
    }
    result["checks"] = run_checks(result)
    return result


def host_share(tiers: dict[str, Any]) -> dict[str, float | None]:
    shares = {}
    for name, info in tiers.items():
        host = sum(info[op]["histograms"]["host"]["total"] for op in ("read", "write"))
        total = sum(info[op]["histograms"]["total"]["total"] for op in ("read", "write"))
        shares[name] = round(host / total, 4) if total > 0 else None
    return shares


def write_result(result: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write atomically (temp file + rename) so a crash never leaves half a result."""
    from kvbench_core.contracts.errors import InputFileError

    target = Path(path)
    if os.environ.get(VALIDATE_ENV) == "1":
        assert_conforms(result, str(target))
    tmp = target.with_suffix(target.suffix + ".tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(result, indent=2, default=_json_default) + "\n")
        tmp.replace(target)
    except OSError as error:  # the output file system filled up during the run, or went away
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise InputFileError(f"{target}: cannot write the result: {error.strerror or error}") from None
    return target


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
