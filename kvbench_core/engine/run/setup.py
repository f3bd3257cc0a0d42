"""Building what a run needs from its plan: the tiers, the source, the autoscaler.

Each piece is built once, from options the plan validated and defaulted once, with errors naming the spec
field, before any tier is written.  A spec in which
no tier can hold even one entry is refused here: every KV write of such a run would fail, and its
"throughput" would be made of requests that stored nothing.
"""

from __future__ import annotations

import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvbench_core.contracts.autoscaler import Autoscaler
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.plugins import require_dependencies
from kvbench_core.contracts.workload import WorkloadContext, WorkloadSource
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.run.factory import build_backend
from kvbench_core.engine.run.user_shard import UserShard
from kvbench_core.runspec import bounds
from kvbench_core.runspec.plan import RunPlan, TierPlan, autoscaler_ceiling, thaw


def build_source(plan: RunPlan, users: int) -> WorkloadSource:
    """The workload source of one client driving ``users`` (its options are the plan's, checked once); in a
    worker process, the run's source over all its users, seen through the process's share (``UserShard``)."""
    choice = plan.workload.source
    require_dependencies(choice.cls, what=f"workload source '{choice.name}'")
    context = WorkloadContext(seed=plan.seed, users=plan.workload.users if plan.shard else users,
                              bytes_per_token=plan.model.bytes_per_token_all_ranks,
                              mode=plan.workload.mode, decode_batch=plan.workload.decode_batch,
                              duration_s=plan.window.duration_s, qos_classes=dict(plan.qos), spec_dir=plan.spec_dir)
    source = choice.cls(thaw(choice.options), context)
    return source if plan.shard is None else UserShard(source, plan.shard)


def build_autoscaler(plan: RunPlan, users: int) -> Autoscaler | None:
    if plan.autoscaler is None:
        return None
    choice = plan.autoscaler.choice
    return choice.cls(thaw(choice.options), initial_users=users, max_users=autoscaler_ceiling(plan.autoscaler, users))


def build_tiers(plan: RunPlan, tiers: list[Tier], *, run_id: str, client_index: int, workers: int,
                io_log_for: Any) -> None:
    """Create every enabled tier's backend, then open each into ``tiers`` (``io_log_for(tier name)`` is the
    tier's command recorder).  All are built before any is opened, so a constructor's refusal writes
    nothing; each is appended as it opens, so a failure half-way still leaves the open ones to close."""
    built = []
    for tier in plan.enabled_tiers:
        context = BackendContext(tier_name=tier.name, run_id=run_id, seed=plan.seed, concurrency=workers,
                                 keep=plan.output.keep_files, io_log=io_log_for(tier.name),
                                 extra={"client_index": client_index}, options_path=f"{tier.field}.options")
        built.append((tier, build_backend(tier.backend, context, codec=tier.codec)))
    for tier, backend in built:
        backend.open()
        capacity = _capacity(tier, backend)
        if math.isfinite(capacity):
            backend.reserve(int(capacity))
        tiers.append(Tier(name=tier.name, backend=backend, capacity=capacity,
                          cold_after=tier.cold_after, description=backend.describe()))


def leftovers_section(tiers: list[Tier]) -> dict[str, Any]:
    """The result's ``sections.leftovers``: what each closed tier could not clean up, by tier; empty when
    every tier cleaned up (``StorageBackend.leftovers``)."""
    left = {tier.name: items for tier in tiers if (items := tier.backend.leftovers())}
    return {"leftovers": left} if left else {}


def _capacity(tier: TierPlan, backend: Any) -> float:
    if tier.capacity != "auto":
        return float(tier.capacity)
    detected = backend.capacity_bytes()
    if detected is None:
        raise BackendUnavailable(
            f"{tier.field}.capacity: 'auto' is not supported by backend '{tier.backend.name}' "
            "here; declare a size such as 8GiB")
    return float(detected)


def check_an_entry_fits(tiers: list[Tier], bytes_per_token: int, large_entry_limit_ratio: float) -> None:
    """The opened tiers (``capacity: auto`` measured by now) against a one-token entry (runspec/bounds.py)."""
    bounds.check_an_entry_fits([(tier.name, tier.capacity) for tier in tiers], bytes_per_token,
                               large_entry_limit_ratio)


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
