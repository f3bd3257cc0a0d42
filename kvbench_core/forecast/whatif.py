"""What a forecast is asked to change, and what its model refuses to say.

``--set`` edits the run's own spec (users, an arrival rate, max_inflight, the window), so the forecast's
plan is built by the same loader as a run's.  ``--tier NAME.bandwidth=xN`` makes a tier's operations N
times as fast (its fitted service times divided by N); ``--tier NAME.capacity=SIZE`` (or ``=xN``) resizes
it, and the waterfall's own bookkeeping decides what that does to the hit rates.  ``--clients N`` runs N
clients whose persistent tiers share one device each.

The refusals: a tier the result has no measurement of; a tier operation the run never did (raised when
the simulation first needs it); and a concurrency more than ``CONCURRENCY_REACH`` times the measured one
at a tier, where the fitted queue (a ceiling at the measured bandwidth) is a guess, not a fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.errors import ForecastRefused
from kvbench_core.contracts.units import parse_size
from kvbench_core.forecast.fit import TierModel
from kvbench_core.runspec.plan import RunPlan, users_for_client

#: How far past the measured operations in flight at a tier the model may be taken.
CONCURRENCY_REACH = 16


@dataclass
class TierChanges:
    speedup: dict[str, float] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)  # "64GiB" or "x2"


def parse_tier_changes(items: list[str]) -> TierChanges:
    """``NAME.bandwidth=xN`` / ``NAME.capacity=SIZE|xN`` items; a bad one is one line naming it."""
    changes = TierChanges()
    for item in items:
        name_field, _, value = item.partition("=")
        name, _, knob = name_field.partition(".")
        if not value or knob not in ("bandwidth", "capacity"):
            raise ForecastRefused(f"forecast: --tier {item!r}: expected NAME.bandwidth=xN or NAME.capacity=SIZE")
        if knob == "bandwidth":
            changes.speedup[name] = _factor(item, value)
        else:
            if value.startswith("x"):
                _factor(item, value)
            changes.capacity[name] = value
    return changes


def _factor(item: str, value: str) -> float:
    try:
        factor = float(value.removeprefix("x"))
    except ValueError:
        factor = 0.0
    if not value.startswith("x") or not math.isfinite(factor) or factor <= 0:
        raise ForecastRefused(f"forecast: --tier {item!r}: a factor is written xN with N > 0 (x4, x0.5)")
    return factor


def capacities(plan: RunPlan, result: dict[str, Any], changes: TierChanges) -> dict[str, float]:
    """Each enabled tier's capacity in bytes: the plan's, ``auto`` as the measured run found it, then the
    what-ifs."""
    measured = (result.get("metrics") or {}).get("tiers") or {}
    sizes = {}
    for tier in plan.enabled_tiers:
        size = tier.capacity
        if size == "auto":
            size = (measured.get(tier.name) or {}).get("capacity_bytes") or math.inf
        change = changes.capacity.get(tier.name)
        if change is not None:
            size = float(size) * float(change[1:]) if change.startswith("x") else float(parse_size(change))
        sizes[tier.name] = float(size)
    return sizes


def check_tiers(plan: RunPlan, models: dict[str, TierModel], changes: TierChanges) -> None:
    """Every tier the forecast runs, and every tier a what-if names, was measured."""
    names = [t.name for t in plan.enabled_tiers] + list(changes.speedup) + list(changes.capacity)
    for name in names:
        if name not in models:
            measured = ", ".join(sorted(models)) or "none"
            raise ForecastRefused(f"forecast: tier '{name}' has no measurement in the result (measured: "
                                  f"{measured}): its service model cannot be fitted")
    for name, factor in changes.speedup.items():
        for model in models[name].ops.values():
            model.speedup = factor


def check_concurrency(plan: RunPlan, measured: RunPlan, models: dict[str, TierModel], clients: int) -> list[str]:
    """Refuse a forecast that would put far more operations in flight at a tier than the fit saw; otherwise
    the lines that say where it goes past the measured concurrency (and so assumes the measured ceiling)."""
    def workers(p: RunPlan, count: int) -> int:
        return sum(p.workers(users_for_client(p.workload.users, p.workload.users_scope, count, i))
                   for i in range(count))

    forecast_workers, measured_workers = workers(plan, clients), workers(measured, measured.clients_total)
    beyond = []
    for name, model in models.items():
        if name not in {t.name for t in plan.enabled_tiers}:
            continue
        sharing = forecast_workers if not model.volatile else workers(plan, 1)
        seen = measured_workers if not model.volatile else workers(measured, 1)
        if sharing > CONCURRENCY_REACH * max(seen, model.servers):
            raise ForecastRefused(
                f"forecast: {sharing} workers on tier '{name}' is {sharing / max(seen, 1):.0f}x the {seen} measured; "
                f"the fitted model says nothing past {CONCURRENCY_REACH}x (measure a run nearer that load)")
        if sharing > seen:
            beyond.append(f"{name}: {sharing} workers share it, {sharing / max(seen, 1):.1f}x the {seen} measured: "
                          f"their operations queue at the {model.servers} server(s) the measured run kept busy "
                          "there (its latency an extrapolation)")
    return beyond
