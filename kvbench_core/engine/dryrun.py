"""``kvbench run --dry-run``: what a spec will ask of the storage, worked out without touching it.

The plan draws the run's own request stream (same seed, same source, so the same requests the run will
issue) for a sample of requests and turns it into bytes: the entry written per request profile, what a
request reads, each tier's capacity in mean entries, and the bytes per second the users would offer if
storage took no time at all (closed loop: think time plus generation pacing between a user's requests;
open loop: the arrival rate).  That last figure is an upper bound: it tells whether a disk's bandwidth
is in the right range before 300 s are spent finding out.  No backend is created, so no directory,
bucket or key is touched.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from kvbench_core.contracts.workload import Phase, decode_read_count, derive_phase
from kvbench_core.engine.setup import build_source
from kvbench_core.spec.plan import RunPlan

#: Requests drawn per user for the plan (capped in total), enough for stable means in well under a second.
SAMPLE_PER_USER = 50
SAMPLE_MAX = 5000


def dry_run_estimate(plan: RunPlan) -> dict[str, Any]:
    """What a run plan will ask of the storage (see the module docstring)."""
    model = plan.model
    per_token = model.bytes_per_token_all_ranks
    users = plan.users_for_client(0)
    source = build_source(plan, users)  # the run's own source: same seed, same stream, no tier
    decode_batch = plan.workload.decode_batch
    generation_s = plan.workload.generation_s_per_token
    profiles: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cycle_s: list[float] = []
    arrivals: list[float] = []
    drawn = 0
    limit = min(SAMPLE_MAX, SAMPLE_PER_USER * users)
    exhausted: set[int] = set()
    while drawn < limit and len(exhausted) < users:
        for user in range(users):
            if user in exhausted or drawn >= limit:
                continue
            request = source.next_request(user)
            if request is None:
                exhausted.add(user)
                continue
            drawn += 1
            row = profiles[str(request.tags.get("profile", "all"))]
            written = (request.write.tokens if request.write else 0) * per_token
            read = sum(r.tokens for r in request.reads) * per_token
            if derive_phase(request) in (Phase.PREFILL_DECODE, Phase.DECODE):
                read += decode_read_count(request.generate_tokens, decode_batch) * request.context_tokens * per_token
            row["context_tokens"].append(request.context_tokens)
            row["entry_bytes"].append(written)
            row["read_bytes"].append(read)
            cycle_s.append(request.think_s + request.generate_tokens * generation_s)
            if request.arrival_s is not None:
                arrivals.append(request.arrival_s)
    every = [value for row in profiles.values() for value in row["entry_bytes"]]
    mean_entry = float(np.mean(every)) if every else 0.0
    moved = [w + r for row in profiles.values() for w, r in zip(row["entry_bytes"], row["read_bytes"], strict=True)]
    rate = _offered_rate(users, cycle_s, arrivals)
    return {
        "model": {"name": model.geometry.name, "dtype": model.dtype, "tp": model.tp, "bytes_per_token": per_token},
        "workload": {"source": plan.workload.source.name, "users": users,
                     "max_inflight": plan.workload.max_inflight,
                     "generation_ms_per_token": plan.workload.generation_s_per_token * 1e3,
                     "warmup_s": plan.window.warmup_s, "duration_s": plan.window.duration_s,
                     "requests": plan.window.request_limit, "sampled_requests": drawn},
        "profiles": {name: {"requests": len(row["entry_bytes"]),
                            "context_tokens_mean": float(np.mean(row["context_tokens"])),
                            "entry_bytes_mean": float(np.mean(row["entry_bytes"])),
                            "entry_bytes_p95": float(np.percentile(row["entry_bytes"], 95)),
                            "read_bytes_per_request_mean": float(np.mean(row["read_bytes"]))}
                     for name, row in profiles.items()},
        "tiers": [{"name": t.name, "backend": t.backend.name, "capacity_bytes": t.capacity,
                   "capacity_entries": (t.capacity / mean_entry
                                        if isinstance(t.capacity, int | float) and mean_entry else None)}
                  for t in plan.tiers],
        "offered": {"requests_per_s": rate,
                    "bytes_per_s": None if rate is None or not moved else rate * float(np.mean(moved)),
                    "write_bytes_per_s": None if rate is None or not every else rate * mean_entry,
                    "basis": "open-loop arrivals of the sampled requests" if arrivals
                    else "users / (think + generation time): storage taking no time"},
    }


def _offered_rate(users: int, cycle_s: list[float], arrivals: list[float]) -> float | None:
    """Requests per second offered: the arrival times' rate (open loop, traces), else each user's next
    request after think and generation time with storage taking none (closed loop)."""
    if arrivals:
        span = max(arrivals) - min(arrivals)
        return (len(arrivals) - 1) / span if span > 0 else None
    mean_cycle = float(np.mean(cycle_s)) if cycle_s else 0.0
    return users / mean_cycle if mean_cycle > 0 else None
