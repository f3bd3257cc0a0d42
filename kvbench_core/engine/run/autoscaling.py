"""What an autoscaler sees and what the result records of its decisions (seed §3.12).

The sample covers the time-series points of the last ``interval_s``: rates are their summed counts over
their summed length (never a mean of rates), latencies the worst interval value per QoS class.
Throughput is generated tokens per second, the headline's definition (docs/metrics.md).
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.autoscaler import Decision, TelemetrySample
from kvbench_core.contracts.workload import QoSClass
from kvbench_core.engine.run.load_requests import LoadRequests


def telemetry_sample(series: list[dict[str, Any]], *, t_s: float, interval_s: float, users: int,
                     qos: dict[str, QoSClass], load: LoadRequests | None = None,
                     open_loop: bool = False) -> TelemetrySample:
    """The sample for a decision at ``t_s`` seconds into the window, from the points of the last interval;
    ``load`` adds the per-class histograms of the requests issued at the current load (and empties it)."""
    window = [p for p in series if p["t_s"] >= t_s - interval_s]
    span = sum(p["interval_s"] for p in window)

    def rate(count: str) -> float:
        return sum(p[count] for p in window) / span if span > 0 else 0.0

    last = window[-1] if window else {}
    histograms, split, failed = load.take() if load is not None else ({}, {}, 0)
    return TelemetrySample(
        t_s=t_s, users=users, requests=sum(p["requests"] for p in window),
        generated_tokens_per_s=rate("generated_tokens"), context_tokens_per_s=rate("context_tokens"),
        read_bytes_per_s=rate("read_bytes"), write_bytes_per_s=rate("write_bytes"),
        e2e_p95_s=_worst_per_class(window, "e2e_p95_ms", qos), e2e_p99_s=_worst_per_class(window, "e2e_p99_ms", qos),
        service_p95_s=_worst_per_class(window, "service_p95_ms", qos),
        service_p99_s=_worst_per_class(window, "service_p99_ms", qos),
        sla_p95_s={q: c.p95_target_s for q, c in qos.items()},
        sla_p99_s={q: c.p99_target_s for q, c in qos.items()},
        storage_p95_s=(last.get("storage_p95_ms") or 0.0) / 1000.0,
        service_histograms=histograms, service_split_s=split, tier_bytes_per_s=_tier_rates(window, span),
        open_loop=open_loop, failed_requests=failed,
    )


def _tier_rates(window: list[dict[str, Any]], span: float) -> dict[str, dict[str, float]]:
    """Per tier, read and write bytes over the points' summed length (counts summed, divided once)."""
    names = sorted({name for p in window for name in p.get("tiers") or {}})
    return {name: {op: sum((p.get("tiers") or {}).get(name, {}).get(f"{op}_bytes") or 0 for p in window)
                   / span if span > 0 else 0.0 for op in ("read", "write")} for name in names}


def trajectory_entry(t_s: float, users_before: int, sample: TelemetrySample, decision: Decision) -> dict[str, Any]:
    """The seed's autoscaling_stats entry: users, throughput, saturation, action (and why)."""
    return {"t_s": round(t_s, 3), "users_before": users_before,
            "generated_tokens_per_s": round(sample.generated_tokens_per_s, 3),
            "context_tokens_per_s": round(sample.context_tokens_per_s, 3), **decision.as_dict()}


def _worst_per_class(window: list[dict[str, Any]], field: str, qos: dict[str, QoSClass]) -> dict[str, float]:
    """Per QoS class, the largest of the window's interval values of ``field`` (ms), in seconds."""
    return {q: max(p[field][q] for p in window if q in p.get(field, {})) / 1000.0
            for q in qos if any(q in p.get(field, {}) for p in window)}
