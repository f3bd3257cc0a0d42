"""A forecast from a result: the plan (with ``--set``), the fit, the what-ifs, the simulation, its figures.

The figures are named as the result names the measured ones (docs/metrics.md), so a forecast of the
measured configuration can be read against the run line by line (``measured_figures``), and every
forecast says how sure it is: the 95 % interval of each class's p95 from a bootstrap over the simulated
requests, and how many measured operations each tier's model was fitted from.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvbench_core.contracts.errors import ForecastRefused, InputFileError
from kvbench_core.contracts.plugins import lookup
from kvbench_core.filetiers.directory import CREATE_OPTION
from kvbench_core.forecast.fit import TierModel, fit_tiers, request_overhead_s
from kvbench_core.forecast.simulation import Simulation, Tally
from kvbench_core.forecast.whatif import capacities, check_concurrency, check_tiers, parse_tier_changes
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.plan import RunPlan

#: Requests a class needs in a window for its p95 to be judged (as ``kvbench capacity``'s step).
MIN_REQUESTS = 20
BOOTSTRAP_REPLICATES = 200


def read_result(path: str) -> dict[str, Any]:
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise InputFileError(f"forecast: cannot read the result {path}: {error}") from error
    if not isinstance(result, dict) or "metrics" not in result or "spec" not in result:
        raise InputFileError(f"forecast: {path} is not a kvbench result (no metrics and spec)")
    return result


def directories_not_needed(result: dict[str, Any]) -> list[str]:
    """``--set`` items telling each file tier of the result's spec ``create: true``.  A forecast builds no
    backend, so it creates nothing; the option only lifts the loader's refusal of a directory whose parent
    does not exist here, which a result from another machine's run usually names."""
    tiers = ((result.get("spec") or {}).get("as_written") or {}).get("cache", {}).get("tiers") or []
    sets = []
    for index, tier in enumerate(tiers):
        backend = lookup("backend", str(tier.get("backend")), path=f"cache.tiers[{index}].backend")
        if (backend.options_schema.get("properties") or {}).get("create") is CREATE_OPTION:
            sets.append(f"cache.tiers.{index}.options.create=true")
    return sets


class Forecaster:
    """The measured result and its fit, ready to simulate any number of what-ifs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.result = read_result(path)
        status = (self.result.get("run") or {}).get("status")
        if status in ("failed", "interrupted"):
            raise ForecastRefused(f"forecast: the result's run is {status}: its figures are no model of the tiers")
        self.directories = directories_not_needed(self.result)
        _, self.measured_plan = load_plan(path, self.directories, accept_edited=True)

    def models(self) -> dict[str, TierModel]:
        plan = self.measured_plan  # fresh each time: a what-if changes its speedups
        return fit_tiers(self.result, workers=plan.workers(plan.users_for_client(0)), clients=plan.clients_total,
                         seed=plan.seed)

    def forecast(self, sets: list[str], tiers: list[str], clients: int | None = None) -> dict[str, Any]:
        _, plan = load_plan(self.path, [*self.directories, *sets], accept_edited=True)
        clients = clients or plan.clients_total
        models = self.models()
        changes = parse_tier_changes(tiers)
        check_tiers(plan, models, changes)
        beyond = check_concurrency(plan, self.measured_plan, models, clients)
        started = time.perf_counter()
        tally = Simulation(plan, models, clients=clients, capacities=capacities(plan, self.result, changes),
                           overhead_s=request_overhead_s(self.result)).run()
        figures = figures_of(tally, plan, {name for name, model in models.items() if model.volatile})
        figures["users"] = plan.workload.users
        figures["clients"] = clients
        figures["wall_s"] = round(time.perf_counter() - started, 3)
        figures["beyond_measured"] = beyond + sizes_beyond(tally, models)
        figures["fit"] = {name: {op: {"ops": model.ops, "servers": tier.servers,
                                      "mean_bytes": round(model.mean_bytes)}
                                 for op, model in tier.ops.items()} for name, tier in models.items()}
        return figures


def sizes_beyond(tally: Tally, models: dict[str, TierModel]) -> list[str]:
    """A line per tier operation whose simulated mean size is more than twice or under half the measured
    one: its latencies are the measured ones rescaled (fit.SIZE_EXPONENT), an extrapolation."""
    lines = []
    for (tier, op), count in sorted(tally.tier_ops.items()):
        model = models[tier].ops[op]
        ratio = tally.tier_bytes[tier][op] / count / model.mean_bytes
        if not 0.5 <= ratio <= 2.0:
            lines.append(f"{tier} {op}: operations of {ratio:.1f}x the measured mean size: their latency is the "
                         "measured one rescaled, not measured")
    return lines


def figures_of(tally: Tally, plan: RunPlan, memory: set[str]) -> dict[str, Any]:
    """The forecast's figures, named as the result names them (``memory``: the volatile tiers, whose reads
    are ``cache_hit_rate``'s hits)."""
    window = tally.window_s
    reads = sum(tally.hits.values()) + tally.misses
    rng = np.random.default_rng(plan.seed)
    qos = {}
    for name, histogram in tally.service.items():
        cls = plan.qos[name]
        p95 = histogram.quantile(0.95) if histogram.count else None
        ci = None
        if histogram.count >= MIN_REQUESTS:
            draws = histogram.bootstrap_quantile(0.95, BOOTSTRAP_REPLICATES, rng)
            ci = [_ms(float(np.percentile(draws, 2.5))), _ms(float(np.percentile(draws, 97.5)))]
        p99 = histogram.quantile(0.99) if histogram.count else None
        qos[name] = {"requests": histogram.count, "service_p95_ms": _ms(p95), "service_p95_ci95_ms": ci,
                     "service_p99_ms": _ms(p99), "sla_p95_ms": _ms(cls.p95_target_s),
                     "sla_p99_ms": _ms(cls.p99_target_s), "sla_met": _sla_met(histogram, cls)}
    return {
        "window_s": window, "requests_completed": tally.requests, "requests_write_failed": tally.write_failed,
        "requests_dropped": tally.dropped, "requests_per_s": round(tally.requests / window, 3),
        "tokens_per_s": round((tally.context_tokens + tally.generated_tokens) / window, 3),
        "cache_hit_rate": round(sum(n for tier, n in tally.hits.items() if tier in memory) / reads, 6)
        if reads else None,
        "reads_served_by_tier": dict(sorted(tally.hits.items())), "read_misses": tally.misses,
        "queue_wait_p95_ms": _ms(tally.queue_wait.quantile(0.95)) if tally.queue_wait.count else None,
        "qos": qos,
        "tiers": {tier: {op: round(nbytes / window / 1e9, 6) for op, nbytes in ops.items()}
                  for tier, ops in sorted(tally.tier_bytes.items())},
        "sla_met": all(figures["sla_met"] is not False for figures in qos.values())
        and any(figures["sla_met"] for figures in qos.values()),
    }


def _sla_met(histogram: Any, cls: Any) -> bool | None:
    """As a judged step: p95 within its target, and the p99 too once there are 100 requests; a class with
    requests but fewer than ``MIN_REQUESTS`` is not judged (None) and counts as over in a search."""
    if histogram.count == 0:
        return None
    if histogram.count < MIN_REQUESTS:
        return False
    if histogram.quantile(0.95) > cls.p95_target_s:
        return False
    return histogram.count < 100 or histogram.quantile(0.99) <= cls.p99_target_s


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def measured_figures(result: dict[str, Any]) -> dict[str, Any]:
    """The same figures from the measured result, for the side-by-side (bandwidth by the op figures' bytes)."""
    metrics = result["metrics"]
    window = float(metrics["window"]["measured_s"])
    requests = metrics["requests"]
    return {
        "window_s": window, "requests_completed": requests["completed"],
        "requests_per_s": round(requests["completed"] / window, 3),
        "tokens_per_s": round((requests["context_tokens"] + requests["generated_tokens"]) / window, 3),
        "cache_hit_rate": metrics["headline"].get("cache_hit_rate"),
        "qos": {name: {"requests": q["requests"], "service_p95_ms": q["service_latency_ms"]["p95"]}
                for name, q in metrics["qos"].items()},
        "tiers": {tier: {op: round((figures.get(op) or {}).get("bytes", 0) / window / 1e9, 6)
                         for op in ("read", "write")} for tier, figures in metrics["tiers"].items()},
    }
