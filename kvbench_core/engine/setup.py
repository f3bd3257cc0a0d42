"""Building what a run needs from its spec: the model, the QoS classes, the tiers, the source, the autoscaler.

Each piece is built once, with errors naming the spec field, before any tier is written.  A spec in which
no tier can hold even one entry is refused here: every KV write of such a run would fail, and its
"throughput" would be made of requests that stored nothing.
"""

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvbench_core.contracts.autoscaler import Autoscaler
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_core.contracts.plugins import lookup, require_dependencies
from kvbench_core.contracts.validation import validate_or_raise
from kvbench_core.contracts.workload import DEFAULT_QOS, QoSClass, WorkloadContext, WorkloadSource
from kvbench_core.engine.cache_types import Tier
from kvbench_core.engine.factory import create_backend
from kvbench_core.engine.waterfall import MultiTierCache
from kvbench_core.spec.geometry import resolve_model


def model_of(spec: dict[str, Any]) -> Any:
    config = spec["model"].get("config")
    if config and not os.path.isabs(config):
        config = os.path.join(spec.get("spec_dir", "."), config)
    name = spec["model"].get("name")
    # A name plus a config picks that model from a multi-model file (the LMCache calculator's json).
    return resolve_model(name or config, spec["model"].get("dtype"), spec["model"].get("tp", 1),
                         config=config if name else None)


def qos_classes(spec: dict[str, Any]) -> dict[str, QoSClass]:
    """The seed's QoS table, with the spec's per-class ``qos.<class>.p95/p99`` targets over it."""
    classes = dict(DEFAULT_QOS)
    for name, targets in (spec.get("qos") or {}).items():
        base = classes[name]
        classes[name] = QoSClass(name, base.priority, float(targets.get("p95", base.p95_target_s)),
                                 float(targets.get("p99", base.p99_target_s)))
    return classes


def users_for_client(workload: dict[str, Any], clients_total: int, client_index: int) -> int:
    """Users one client (process or MPI rank) drives: all of ``workload.users``, or its share under ``split``."""
    users = workload["users"]
    if workload["users_scope"] == "split" and clients_total > 1:
        base, extra = divmod(users, clients_total)
        users = base + (1 if client_index < extra else 0)
    return max(1, users)


def build_source(spec: dict[str, Any], users: int, bytes_per_token: int) -> WorkloadSource:
    workload = spec["workload"]
    cls = lookup("source", workload["source"], path="workload.source")
    validate_or_raise(workload["options"], cls.options_schema, root="workload.options")
    require_dependencies(cls, what=f"workload source '{workload['source']}'")
    context = WorkloadContext(seed=spec["seed"], users=users, bytes_per_token=bytes_per_token,
                              mode=workload["mode"], decode_batch=workload["decode_batch"],
                              duration_s=spec.get("duration"), qos_classes=qos_classes(spec),
                              spec_dir=spec.get("spec_dir", "."))
    return cls(workload["options"], context)


def build_autoscaler(spec: dict[str, Any], users: int) -> Autoscaler | None:
    config = spec.get("autoscaler")
    if not config:
        return None
    cls = lookup("autoscaler", config["name"], path="autoscaler.name")
    validate_or_raise(config["options"], cls.options_schema, root="autoscaler.options")
    max_users = config.get("max_users") or max(users * 64, 1024)
    return cls(config["options"], initial_users=users, max_users=max_users)


def build_tiers(spec: dict[str, Any], tiers: list[Tier], *, run_id: str, client_index: int, workers: int,
                io_log_for: Any) -> None:
    """Create and open every enabled tier into ``tiers`` (``io_log_for(tier name)`` is the tier's command
    recorder).  Each is appended as it opens, so a failure half-way still leaves the open ones to close."""
    for index, tier_spec in enumerate(spec["cache"]["tiers"]):
        if tier_spec["capacity"] == 0:
            continue
        context = BackendContext(tier_name=tier_spec["name"], run_id=run_id, seed=spec["seed"],
                                 concurrency=workers, keep=spec["output"]["keep_files"],
                                 io_log=io_log_for(tier_spec["name"]), extra={"client_index": client_index})
        backend = create_backend(tier_spec, context, path=f"cache.tiers[{index}]")
        backend.open()
        tiers.append(Tier(name=tier_spec["name"], backend=backend, capacity=_capacity(tier_spec, backend, index),
                          cold_after=tier_spec.get("cold_after"), description=backend.describe()))


def _capacity(tier_spec: dict[str, Any], backend: Any, index: int) -> float:
    if tier_spec["capacity"] != "auto":
        return float(tier_spec["capacity"])
    detected = backend.capacity_bytes()
    if detected is None:
        raise BackendUnavailable(
            f"cache.tiers[{index}].capacity: 'auto' is not supported by backend '{tier_spec['backend']}' "
            "here; declare a size such as 8GiB")
    return float(detected)


def check_an_entry_fits(tiers: list[Tier], bytes_per_token: int, large_entry_limit_ratio: float) -> None:
    """Refuse a run in which no tier can hold even a one-token entry: every KV write would fail."""
    smallest = max(1, bytes_per_token)
    if any(smallest <= tier.capacity * large_entry_limit_ratio for tier in tiers):
        return
    largest = max(tiers, key=lambda tier: tier.capacity)
    capacity = "unbounded" if math.isinf(largest.capacity) else f"{int(largest.capacity)} bytes"
    raise SpecError(f"cache.tiers: no tier can hold one entry: a single token of this model is {smallest} bytes "
                    f"of KV, the largest tier ('{largest.name}') holds {capacity} "
                    f"(entries above {large_entry_limit_ratio:.0%} of a tier skip it); give a tier more capacity")


def preload(source: WorkloadSource, cache: MultiTierCache, workers: int, bytes_per_token: int) -> dict[str, Any]:
    """Store the source's ahead-of-time entries (RAG ingestion, decode-only population); not measured.

    Only as much as the tiers hold below their eviction targets: a population that overfilled them
    would evict its own first entries, and the decode reads of those would miss.  The rest is not
    stored, with a warning, and ``complete`` is false in ``workload.preload``."""
    budget = sum(t.capacity for t in cache.tiers) * cache.policy.target_usage_ratio
    writes, planned, complete = [], 0, True
    for write in source.preload():  # a generator: stopping early costs nothing for the entries left
        size = max(1, write.tokens) * bytes_per_token
        if planned + size > budget:
            complete = False
            break
        planned += size
        writes.append((write.key, size))
    if not writes and complete:
        return {}
    if not complete:
        print(f"kvbench: warning: the tiers hold {len(writes)} pre-populated entries below their eviction "
              "targets; the rest of the population was not stored, and reads of it will miss", file=sys.stderr)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, min(workers, 16))) as threads:
        stored = sum(tier is not None for tier in threads.map(lambda w: cache.put(*w), writes))
    return {"entries": stored, "bytes": planned, "complete": complete and stored == len(writes),
            "seconds": time.perf_counter() - start}
