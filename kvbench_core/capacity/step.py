"""One judged step: a load held until every QoS class has enough requests, judged on all of them at once.

The step merges the per-class service-latency histograms of its decisions' samples (the requests issued
at this load: engine/run/load_requests.py) and reads each class's p95 from the merged bucket counts.  Not the
worst of the 1 s points' p95s: with a few requests per point that is close to the step's slowest request.
A class needs ``min_requests`` completed requests (20 for a p95: by the nearest rank the p95 of fewer is
the slowest one); a class with none at this load (no user of it yet) is not judged.  The SLA is the one
``sla_met`` judges (docs/metrics.md): the p95 target, and the p99 target too once the class has 100
requests in the step (fewer, and their p99 is simply the slowest: recorded, not judged).  A step that cannot
get its requests within ``max_step_s`` is ``not judged``, and the search counts it as over the SLA: a
load whose p95 could not be measured is not a load known to be within it.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.autoscaler import TelemetrySample

WITHIN, OVER, NOT_JUDGED = "within", "over", "not judged"
#: The fewest requests whose p99 is not their slowest: by the nearest rank, p99 of 100 is the 99th.
MIN_P99_REQUESTS = 100


@dataclass(frozen=True)
class ClassFigures:
    """One QoS class in one step: its requests, service p95/p99 and how close they are to its SLA."""

    requests: int
    service_p95_ms: float
    service_p99_ms: float
    sla_p95_ms: float
    saturation: float  # the larger of p95/SLA p95 and (when judged) p99/SLA p99: 1.0 is exactly at the SLA
    sla_p99_ms: float = 0.0
    p99_judged: bool = False  # at least MIN_P99_REQUESTS requests: the p99 is a percentile, not the slowest

    @classmethod
    def of(cls, histogram: Any, sla_p95_ms: float, sla_p99_ms: float) -> ClassFigures:
        """The figures of a class's merged histogram (seconds) against its targets (ms)."""
        p95, p99 = histogram.quantile(0.95) * 1000.0, histogram.quantile(0.99) * 1000.0
        judged = histogram.count >= MIN_P99_REQUESTS and sla_p99_ms > 0
        ratios = [p95 / sla_p95_ms if sla_p95_ms > 0 else 0.0, *([p99 / sla_p99_ms] if judged else [])]
        return cls(histogram.count, p95, p99, sla_p95_ms, max(ratios), sla_p99_ms, judged)

    def limit(self) -> str:
        """``service p95 97 ms of 100 ms`` (or the p99, when that is the nearer to its target)."""
        if self.p99_judged and self.service_p99_ms / self.sla_p99_ms > self.service_p95_ms / self.sla_p95_ms:
            return f"service p99 {_ms(self.service_p99_ms)} ms of {_ms(self.sla_p99_ms)} ms"
        return f"service p95 {_ms(self.service_p95_ms)} ms of {_ms(self.sla_p95_ms)} ms"


def _ms(value: float) -> str:
    """Whole milliseconds from 10 ms up (97 ms of 100 ms), one decimal below (4.2 ms)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


@dataclass(frozen=True)
class Step:
    """A judged step, as the result records it (``autoscaling.summary.steps``) and the curve plots it.

    ``histograms`` are the merged per-class service histograms (``LatencyHistogram``), kept so the
    confidence interval and ``kvbench check`` can re-read the step's requests."""

    load: float  # users (closed loop)
    started_s: float  # seconds into the measured window
    duration_s: float
    verdict: str  # within | over | not judged
    classes: dict[str, ClassFigures]
    generated_tokens_per_s: float
    requests_per_s: float
    tiers: dict[str, dict[str, float]]  # name -> read/write bytes per s, device share of its op time
    split: dict[str, float]  # share of the requests' service time: queue, "<tier> <op> device|host"
    reason: str = ""
    histograms: dict[str, Any] = field(default_factory=dict, repr=False)
    failed: int = 0  # requests of the step that failed: any makes it over (not served is not within)

    @property
    def requests(self) -> int:
        return sum(c.requests for c in self.classes.values())

    @property
    def limiting(self) -> str | None:
        """The class closest to (or furthest over) its SLA."""
        return max(self.classes, key=lambda q: self.classes[q].saturation) if self.classes else None

    @property
    def saturation(self) -> float | None:
        name = self.limiting
        return None if name is None else self.classes[name].saturation

    @property
    def dominant(self) -> str | None:
        """The part of the service time that took most of it: ``queue`` or ``"<tier> <op> device"``."""
        return max(self.split, key=lambda part: self.split[part]) if self.split else None

    def as_dict(self) -> dict[str, Any]:
        return {"load": self.load, "started_s": round(self.started_s, 3), "duration_s": round(self.duration_s, 3),
                "verdict": self.verdict, "reason": self.reason, "requests": self.requests,
                "saturation": None if self.saturation is None else round(self.saturation, 4),
                "limiting_class": self.limiting,
                "classes": {q: {k: round(v, 4) if isinstance(v, float) else v for k, v in vars(c).items()}
                            for q, c in self.classes.items()},
                "generated_tokens_per_s": round(self.generated_tokens_per_s, 3),
                "requests_per_s": round(self.requests_per_s, 3),
                "tiers": {t: {k: round(v, 4) for k, v in row.items()} for t, row in self.tiers.items()},
                "split": {part: round(share, 4) for part, share in self.split.items()}, "failed": self.failed,
                "histograms": {q: h.to_dict() for q, h in self.histograms.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], histogram: Callable[[dict[str, Any]], Any]) -> Step:
        """A recorded step; ``histogram`` rebuilds a histogram from its dict (``LatencyHistogram.from_dict``).
        A class's figures are read again from its histogram where the step kept it (the record rounds them)."""
        histograms = {q: histogram(h) for q, h in data.get("histograms", {}).items()}
        classes = {q: ClassFigures.of(histograms[q], c["sla_p95_ms"], c.get("sla_p99_ms", 0.0)) if q in histograms
                   else ClassFigures(**c) for q, c in data["classes"].items()}
        return cls(load=data["load"], started_s=data["started_s"], duration_s=data["duration_s"],
                   verdict=data["verdict"], reason=data.get("reason", ""), classes=classes,
                   generated_tokens_per_s=data["generated_tokens_per_s"], requests_per_s=data["requests_per_s"],
                   tiers=data["tiers"], split=data["split"], failed=int(data.get("failed", 0)),
                   histograms=histograms)


class JudgedStep:
    """Accumulates the samples of one load until it can be judged (``shortfall`` is None)."""

    def __init__(self, load: float, started_s: float, *, min_requests: int, max_step_s: float,
                 expected: Iterable[str] = ()) -> None:
        """``expected``: the classes the workload is known to issue (they completed requests at an earlier
        load); one with no completed request at this load is starved, and short like any other."""
        self.load, self.started_s = load, started_s
        self.min_requests, self.max_step_s = min_requests, max_step_s
        self.expected = frozenset(expected)
        self._ended_s = started_s
        self._histograms: dict[str, Any] = {}
        self._split: dict[str, float] = defaultdict(float)
        self._tokens = 0.0
        self._tier_bytes: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._sla_p95_s: dict[str, float] = {}
        self._sla_p99_s: dict[str, float] = {}
        self._failed = 0

    def add(self, sample: TelemetrySample) -> None:
        """One decision's sample: its requests' histograms merged in, its rates weighted by its length."""
        span = max(0.0, sample.t_s - self._ended_s)
        self._ended_s = sample.t_s
        self._sla_p95_s, self._sla_p99_s = dict(sample.sla_p95_s), dict(sample.sla_p99_s)
        for name, histogram in sample.service_histograms.items():
            if name in self._histograms:
                self._histograms[name].merge(histogram)
            else:
                self._histograms[name] = copy.deepcopy(histogram)
        self._failed += sample.failed_requests
        for part, seconds in sample.service_split_s.items():
            self._split[part] += seconds
        self._tokens += sample.generated_tokens_per_s * span
        for tier, rates in sample.tier_bytes_per_s.items():
            for op, rate in rates.items():
                self._tier_bytes[tier][op] += rate * span

    @property
    def duration_s(self) -> float:
        return self._ended_s - self.started_s

    def shortfall(self) -> str | None:
        """Why the step cannot be judged yet ("responsive 12 of 20 requests"), or None when it can."""
        counts = {q: h.count for q, h in self._histograms.items() if h.count}
        if not counts:
            return "no completed requests at this load yet"
        counts.update({q: 0 for q in self.expected if q not in counts})  # starved: served at lower loads
        short = [f"{q} {n} of {self.min_requests}" for q, n in sorted(counts.items()) if n < self.min_requests]
        return f"{', '.join(short)} requests" if short else None

    def timed_out(self) -> bool:
        return self.duration_s >= self.max_step_s

    def judge(self) -> Step:
        """The step's verdict from its merged histograms: within when every judged class's p95 is at or
        under its SLA, over when one is above, not judged when a class lacks its requests."""
        short = self.shortfall()
        classes = {q: self._figures(q, h) for q, h in sorted(self._histograms.items())
                   if h.count >= self.min_requests and q in self._sla_p95_s}
        if short is not None:
            verdict, reason = NOT_JUDGED, f"{short} after {self.duration_s:.1f} s (max_step_s {self.max_step_s:g})"
        elif not classes:
            verdict, reason = NOT_JUDGED, "no class with an SLA completed requests"
        else:
            worst = max(classes, key=lambda q: classes[q].saturation)
            figures = classes[worst]
            verdict = WITHIN if all(c.saturation <= 1.0 for c in classes.values()) and not self._failed else OVER
            reason = f"{worst} {figures.limit()} over {sum(c.requests for c in classes.values())} requests"
            if self._failed:
                reason = f"{self._failed} requests failed at this load; {reason}"
        span = max(self.duration_s, 1e-9)
        return Step(load=self.load, started_s=self.started_s, duration_s=self.duration_s, verdict=verdict,
                    classes=classes, generated_tokens_per_s=self._tokens / span,
                    requests_per_s=sum(h.count for h in self._histograms.values()) / span,
                    tiers=self._tiers(span), split=self._shares(), reason=reason,
                    histograms=dict(self._histograms), failed=self._failed)

    def _figures(self, name: str, histogram: Any) -> ClassFigures:
        return ClassFigures.of(histogram, self._sla_p95_s[name] * 1000.0, self._sla_p99_s.get(name, 0.0) * 1000.0)

    def _shares(self) -> dict[str, float]:
        total = sum(self._split.values())
        return {part: seconds / total for part, seconds in sorted(self._split.items())} if total > 0 else {}

    def _tiers(self, span: float) -> dict[str, dict[str, float]]:
        """Per tier: bytes per second read and written, and the device's share of its operations' time."""
        names = sorted(set(self._tier_bytes) | {part.split(" ")[0] for part in self._split if part != "queue"})
        rows = {}
        for name in names:
            device = sum(s for p, s in self._split.items() if p.startswith(f"{name} ") and p.endswith(" device"))
            total = sum(s for p, s in self._split.items() if p.startswith(f"{name} "))
            rows[name] = {"read_bytes_per_s": self._tier_bytes[name]["read"] / span,
                          "write_bytes_per_s": self._tier_bytes[name]["write"] / span,
                          "device_share": device / total if total > 0 else 0.0}
        return rows
