"""``kvbench run --dry-run``: what a spec will ask of the storage, worked out without touching it.

The plan draws the run's own request stream (same seed, same source, so the same requests the run will
issue) for a sample of requests and turns it into bytes: the entry written per request profile, what a
request reads, each tier's capacity in mean entries, and the bytes per second the users would offer if
storage took no time at all (closed loop: think time plus generation pacing between a user's requests;
open loop: the arrival rate).  That last figure is an upper bound: it tells whether a disk's bandwidth
is in the right range before 300 s are spent finding out.  No backend is created, so no directory,
bucket or key is touched.

With ``clients: N`` the sample is client 0's stream (the spec's seed; every other client draws the same
distributions with its own seed), each client has tiers of its own of the spec's capacities, and the
offered load is every client's: closed loop, all clients' users over the cycle time; open loop, each
client replays its own arrival process, so N times one's rate.

A tier that no drawn entry fits (the smallest is above ``large_entry_limit_ratio`` of its capacity) is
warned about here (``tier_fit_warnings``): every entry skips it, so it reads and writes nothing, which a
summary's ``0.000 GB`` alone does not explain.  A run warns by the same rule from the entries its own
requests wrote (``RunState.smallest_entry_bytes``): drawing the stream a second time would build the source
twice, and what the run did is the better witness.

Before any of that, ``check_requirements`` asks what the run's set-up asks before it touches storage: each
backend's, codec's, source's and output format's optional packages and drivers (a GDS tier without the NVIDIA
driver, a zstd codec without cramjam), with the same one-line refusal and exit code, so a dry run that
passes means the run will get as far as opening its tiers.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvbench_core.codecs.stage import codec_class
from kvbench_core.contracts.percentiles import sample_percentiles
from kvbench_core.contracts.units import format_bytes
from kvbench_core.contracts.workload import Phase, decode_read_count, derive_phase
from kvbench_core.engine.run.factory import require_backend
from kvbench_core.engine.run.setup import build_source
from kvbench_core.engine.run.window_fit import window_fit_warnings
from kvbench_core.runspec.bounds import admits
from kvbench_core.runspec.plan import RunPlan, thaw

#: Requests drawn per user for the plan (capped in total), enough for stable means in well under a second.
SAMPLE_PER_USER = 50
SAMPLE_MAX = 5000


@dataclass
class _Draw:
    """The first requests of a plan's own stream, as bytes (read only once drawn)."""

    users: int
    profiles: dict[str, dict[str, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    cycle_s: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    drawn: int = 0

    @property
    def entry_bytes(self) -> list[float]:
        return [value for row in self.profiles.values() for value in row["entry_bytes"]]


def _draw(plan: RunPlan) -> _Draw:
    """The plan's first requests (``SAMPLE_PER_USER`` per user, at most ``SAMPLE_MAX``)."""
    per_token = plan.model.bytes_per_token_all_ranks
    draw = _Draw(users=plan.users_for_client(0))
    users = draw.users
    source = build_source(plan, users)  # the run's own source: same seed, same stream, no tier
    decode_batch = plan.workload.decode_batch
    generation_s = plan.workload.generation_s_per_token
    limit = min(SAMPLE_MAX, SAMPLE_PER_USER * users)
    exhausted: set[int] = set()
    while draw.drawn < limit and len(exhausted) < users:
        for user in range(users):
            if user in exhausted or draw.drawn >= limit:
                continue
            request = source.next_request(user)
            if request is None:
                exhausted.add(user)
                continue
            draw.drawn += 1
            row = draw.profiles[str(request.tags.get("profile", "all"))]
            written = (request.write.tokens if request.write else 0) * per_token
            read = sum(r.tokens for r in request.reads) * per_token
            if derive_phase(request) in (Phase.PREFILL_DECODE, Phase.DECODE):
                read += decode_read_count(request.generate_tokens, decode_batch) * request.context_tokens * per_token
            row["context_tokens"].append(request.context_tokens)
            row["entry_bytes"].append(written)
            row["read_bytes"].append(read)
            draw.cycle_s.append(request.think_s + request.generate_tokens * generation_s)
            if request.arrival_s is not None:
                draw.arrivals.append(request.arrival_s)
    return draw


def dry_run_estimate(plan: RunPlan, client_plans: Sequence[RunPlan] = ()) -> dict[str, Any]:
    """What a run plan will ask of the storage (see the module docstring).  ``client_plans``: the plan
    each client of a scaled-out run runs (``scaleout``), for its users and directories."""
    check_requirements(plan)
    model = plan.model
    draw = _draw(plan)
    every = draw.entry_bytes
    mean_entry = float(np.mean(every)) if every else 0.0
    moved = [w + r for row in draw.profiles.values()
             for w, r in zip(row["entry_bytes"], row["read_bytes"], strict=True)]
    users_total = sum(p.users_for_client(i) for i, p in enumerate(client_plans)) or draw.users
    rate = _offered_rate(users_total, max(1, len(client_plans)), draw.cycle_s, draw.arrivals)
    return {
        "model": {"name": model.geometry.name, "dtype": model.dtype, "tp": model.tp,
                  "bytes_per_token": model.bytes_per_token_all_ranks},
        "workload": {"source": plan.workload.source.name, "users": draw.users,
                     "max_inflight": plan.workload.max_inflight,
                     "generation_ms_per_token": plan.workload.generation_s_per_token * 1e3,
                     "warmup_s": plan.window.warmup_s, "duration_s": plan.window.duration_s,
                     "requests": plan.window.request_limit, "sampled_requests": draw.drawn},
        "clients": _clients(plan, client_plans) if client_plans else None,
        "profiles": {name: _profile_figures(row) for name, row in draw.profiles.items()},
        "entry_bytes_min": _smallest_entry(draw),
        "tiers": [{"name": t.name, "backend": t.backend.name, "capacity_bytes": t.capacity,
                   "capacity_entries": _entries_held(t.capacity, mean_entry)} for t in plan.tiers],
        "warnings": [*tier_fit_warnings(plan, {t.name: t.capacity for t in plan.tiers}, _smallest_entry(draw),
                                        f"the run's first {draw.drawn} requests"),
                     *window_fit_warnings(plan, [pair for row in draw.profiles.values()
                                                 for pair in zip(row["entry_bytes"], row["read_bytes"], strict=True)],
                                          f"the run's first {draw.drawn} requests")],
        "offered": _offered(rate, moved, mean_entry if every else None, draw.arrivals),
    }


def _profile_figures(row: dict[str, list[float]]) -> dict[str, Any]:
    """One profile's drawn requests: count, mean context, entry size (mean, p95), bytes read per request."""
    return {"requests": len(row["entry_bytes"]), "context_tokens_mean": float(np.mean(row["context_tokens"])),
            "entry_bytes_mean": float(np.mean(row["entry_bytes"])),
            "entry_bytes_p95": float(sample_percentiles(row["entry_bytes"], (95,))[0]),
            "read_bytes_per_request_mean": float(np.mean(row["read_bytes"]))}


def _entries_held(capacity: Any, mean_entry: float) -> float | None:
    """How many mean-sized entries a tier's capacity holds (None: ``auto``, or no entry written)."""
    return capacity / mean_entry if isinstance(capacity, int | float) and mean_entry else None


def _offered(rate: float | None, moved: list[float], mean_entry: float | None,
             arrivals: list[float]) -> dict[str, Any]:
    """The load the drawn requests offer the storage: requests, bytes moved and written per second."""
    return {"requests_per_s": rate,
            "bytes_per_s": None if rate is None or not moved else rate * float(np.mean(moved)),
            "write_bytes_per_s": None if rate is None or mean_entry is None else rate * mean_entry,
            "basis": "open-loop arrivals of the sampled requests" if arrivals
            else "users / (think + generation time): storage taking no time"}


def check_requirements(plan: RunPlan) -> None:
    """Refuse, as the run's set-up would, a tier or codec whose optional packages or driver are missing here
    (the source's are checked when the draw builds it, the output formats' by the command)."""
    for tier in plan.enabled_tiers:
        require_backend(tier.backend)
        codec_class(thaw(tier.codec) if tier.codec else None, path=tier.backend.field)


def _smallest_entry(draw: _Draw) -> float | None:
    """The smallest KV entry the drawn requests write (requests that write none left out)."""
    written = [size for size in draw.entry_bytes if size > 0]
    return min(written) if written else None


def tier_fit_warnings(plan: RunPlan, capacities: Mapping[str, float | str], smallest: float | None,
                      whose: str) -> list[str]:
    """One warning per enabled tier that no entry fits: every entry above ``large_entry_limit_ratio`` of a
    tier's capacity skips it (engine/cache/placement.py), so the tier reads and writes nothing.  Not a refusal:
    the tiers below still take the entries (a tier is disabled on purpose by capacity 0, which is not warned
    about).  ``capacities``: by tier name, as the run resolved them (``auto`` measured); ``smallest``: the
    smallest KV entry of ``whose`` requests (the plan's draw, or what a run's requests wrote)."""
    if not smallest:
        return []
    ratio = float(plan.eviction["large_entry_limit_ratio"])
    warnings = []
    for tier in plan.enabled_tiers:
        capacity = capacities.get(tier.name, tier.capacity)
        if isinstance(capacity, int | float) and not admits(capacity, smallest, ratio):
            warnings.append(
                f"{tier.field} '{tier.name}': capacity {format_bytes(capacity)} holds no entry of this run: the "
                f"smallest KV entry of {whose} is {format_bytes(smallest)} (an entry above {ratio:.0%} of a "
                "tier skips it), so this tier reads and writes nothing; give it more capacity, or 0 to leave it out")
    return warnings


def _clients(plan: RunPlan, client_plans: Sequence[RunPlan]) -> dict[str, Any]:
    """Each client's users and the directories its file tiers use (``<path>/client<i>``), absolute: a
    relative tier path is taken from the working directory, which the plan text should not leave to guess."""
    users = [p.users_for_client(i) for i, p in enumerate(client_plans)]
    directories = {}
    for tier in plan.enabled_tiers:
        option = tier.backend.cls.directory_option
        if option and isinstance(tier.backend.options.get(option), str):
            directories[tier.name] = [os.path.abspath(p.tiers[tier.index].backend.options[option])
                                      for p in client_plans]
    return {"count": len(client_plans), "mode": "local", "users_scope": plan.workload.users_scope,
            "users": users, "users_total": sum(users), "directories": directories}


def _offered_rate(users: int, clients: int, cycle_s: list[float], arrivals: list[float]) -> float | None:
    """Requests per second offered by every client: the arrival times' rate times the clients, each replaying
    its own arrivals (open loop, traces), else each user's next request after think and generation time with
    storage taking none (closed loop), over every client's users."""
    if arrivals:
        span = max(arrivals) - min(arrivals)
        return clients * (len(arrivals) - 1) / span if span > 0 else None
    mean_cycle = float(np.mean(cycle_s)) if cycle_s else 0.0
    return users / mean_cycle if mean_cycle > 0 else None
