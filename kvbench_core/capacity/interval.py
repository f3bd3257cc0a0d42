"""The answer from the judged steps, and its confidence interval from the steps' own requests.

**The answer.**  Steps are taken in order of load (steps at the same load merged: their histograms add).
The first load whose worst class is over its SLA (or was not judged) ends the curve; the answer is where
the saturation (the worst class's service p95 / its SLA p95, or p99 / SLA p99 where judged: capacity/step.py)
crosses 1.0, interpolated linearly between that step and the step below it, rounded down to whole users.
Once the bisection has narrowed the bracket to one user this is exactly the highest load judged within;
with a wider bracket (the budget ran out) it is between the two steps that bracket it.  No step over the
SLA: the answer is the highest load measured, marked ``at_least``.

**The interval: where a repeat of the search lands.**  Two things move a repeat's answer: sampling (other
requests) and drift (the machine itself slower or faster minutes later: on a shared host the same load's
p95 moved 10x between searches, docs/autoscaling.md).  Sampling is a percentile bootstrap over requests:
each replicate redraws every step's requests with replacement (per class, from its merged histogram:
``LatencyHistogram.bootstrap_quantile``), reads the p95s again and computes the answer again by the same
rule.  Drift is measured where a load was judged more than once (the measured search judges the
bracket's two ends again at its end: capacity/search.py): ``drift`` is the pooled standard deviation of
those judgements' log saturations less the part their own bootstrap variances explain (``drift_of``).
A machine ``f`` times as slow multiplies every saturation by ``f``, which moves the crossing by
``f ** (-1 / b)``, ``b`` the curve's log-log slope near the answer (``_slope``); so each replicate's answer
is multiplied by ``exp(-drift * z / b)``, a fresh normal ``z`` per replicate.  (Scaling the steps'
saturations instead would keep a replicate between the loads measured: a faster machine could never
move the answer past the first step over.)  A repeat differs from this answer by the difference of two
such independent answers, which reaches sqrt(2) times as far as one: the interval's ends are the
replicates' 2.5th and 97.5th percentiles moved away from the answer by that factor, each side its own
reach, rounded down, never below 0.  With no load judged twice (an old result; the ``qos`` autoscaler's
walk that never came back to a load) the drift is not measured and counts as 0, and ``method`` says so.
A fixed seed gives the same steps the same interval, which ``kvbench check`` re-derives.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvbench_core.capacity.step import NOT_JUDGED, OVER, WITHIN, ClassFigures, Step

REPLICATES = 1000
#: How much further a repeat's answer reaches than one answer's spread: the difference of two independent
#: answers has sqrt(2) times the spread of one.
REPEAT = math.sqrt(2)
CONFIDENCE = 0.95
#: The answer's name in the result, by what the load is.
KEYS = {"users": "max_users_within_sla", "arrival_rate_percent": "max_arrival_rate_percent_within_sla"}


@dataclass(frozen=True)
class Answer:
    """The highest load within every class's SLA, its interval, and what limited it."""

    load: int | None  # None: no step was judged
    ci_low: int | None
    ci_high: int | None
    at_least: bool  # no step was over: the answer is the highest load measured, the true one may be higher
    limited_by: str | None  # "responsive: service p95 97 ms of 100 ms, mostly nvme read device time"
    steps: int
    drift: float = 0.0  # run-to-run sd of a step's log saturation, from the loads judged twice
    repeated_loads: int = 0  # loads judged more than once: what ``drift`` was measured from

    def as_dict(self, load_kind: str = "users") -> dict[str, Any]:
        """The result's record: ``max_users_within_sla`` for users, ``max_arrival_rate_percent_within_sla``
        for an open loop's arrival rate (percent of the source's)."""
        return {KEYS[load_kind]: self.load, "ci95": [self.ci_low, self.ci_high], "at_least": self.at_least,
                "limited_by": self.limited_by, "judged_steps": self.steps, "confidence": CONFIDENCE,
                "drift": round(self.drift, 4), "repeated_loads": self.repeated_loads, "method": self.method()}

    def method(self) -> str:
        """How the interval was made, in words (the result's ``method``)."""
        drift = (f"drift sd {self.drift:.3f} of the log saturation from {self.repeated_loads} loads judged twice"
                 if self.repeated_loads else "no load judged twice, so no drift measured (sampling only)")
        return (f"where a repeat lands: sqrt(2) x the reach of a percentile bootstrap over requests "
                f"({REPLICATES} replicates), {drift}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answer:
        """The answer as ``as_dict`` recorded it (an autoscaler summary in a result)."""
        low, high = data.get("ci95") or (None, None)
        return cls(data.get(KEYS[data.get("load_kind") or "users"]), low, high, bool(data.get("at_least")),
                   data.get("limited_by"), int(data.get("judged_steps") or 0), float(data.get("drift") or 0.0),
                   int(data.get("repeated_loads") or 0))

    def line(self, load_kind: str = "users") -> str:
        """``max users within SLA: 48 (95 % CI 44-52), limited by responsive: ...`` (an open loop:
        ``max arrival rate within SLA: 250 % of the spec's (95 % CI 230-270 %)``)."""
        noun, unit = ("users", "") if load_kind == "users" else ("arrival rate", " %")
        if self.load is None:
            return f"max {noun} within SLA: not found (no step had enough requests to judge)"
        bound = "at least " if self.at_least else ""
        whose = " of the spec's" if unit else ""
        ci = f" (95 % CI {self.ci_low}-{self.ci_high}{unit})" if self.ci_low is not None else ""
        limit = f", limited by {self.limited_by}" if self.limited_by else ""
        return f"max {noun} within SLA: {bound}{self.load}{unit}{whose}{ci}{limit}"


def answer(steps: list[Step], *, seed: int = 0, replicates: int = REPLICATES) -> Answer:
    """The answer and the interval a repeat lands in, from the judged steps (in any order)."""
    curve = merged_by_load(steps)
    if not curve:
        return Answer(None, None, None, False, None, 0)
    loads = np.array([s.load for s in curve], dtype=float)
    observed = np.array([[_saturation(s)] for s in curve]).T  # one "replicate": the measured p95s
    point, at_least = _crossing(loads, observed)
    rng = np.random.default_rng(seed)
    drift, repeated = drift_of(steps, rng)
    draws = np.stack([_resampled_saturation(s, replicates, rng) for s in curve], axis=1)
    spread, _ = _crossing(loads, draws)
    load = int(point[0])
    spread = spread * np.exp(-drift * rng.standard_normal(replicates) / _slope(curve, load))
    tail = (1 - CONFIDENCE) / 2 * 100
    ends = np.percentile(spread, [tail, 100 - tail], method="inverted_cdf")
    # A repeat has its own sampling and drift besides this answer's: sqrt(2) x each side's reach.
    low, high = (max(0, math.floor(load + REPEAT * (end - load))) for end in ends)
    return Answer(load, low, high, bool(at_least[0]), _limit(curve, load), len(curve), drift, repeated)


def _slope(curve: list[Step], load: int) -> float:
    """The log-log slope of saturation against load near ``load`` (the steps from half to twice it, else all
    judged ones), by least squares; 1 (saturation proportional to load) where it cannot be fitted or is not
    rising.  Queueing near the SLA makes it steep, so a drift moves the answer less there."""
    judged = [(s.load, _saturation(s)) for s in curve if math.isfinite(_saturation(s)) and _saturation(s) > 0]
    near = [(x, y) for x, y in judged if load / 2 <= x <= 2 * load] if load > 0 else []
    points = near if len({x for x, _ in near}) >= 2 else judged
    if len({x for x, _ in points}) < 2:
        return 1.0
    slope = float(np.polyfit(np.log([x for x, _ in points]), np.log([y for _, y in points]), 1)[0])
    return slope if slope > 0 else 1.0


def drift_of(steps: list[Step], rng: np.random.Generator, replicates: int = 200) -> tuple[float, int]:
    """The drift: the standard deviation of a step's log saturation between judgements of one load, less
    what each judgement's own sampling explains; and how many loads were judged more than once (0, 0 when
    none was: not measured).  The pooled variance of the judgements of a load holds both; the mean of the
    judgements' own bootstrap variances is the sampling part, and what is left (never below 0) is the
    machine's.  A judgement that is not a finite, positive saturation (not judged, failed, no latency) is
    no measurement of the drift."""
    by_load: dict[float, list[Step]] = {}
    for step in steps:
        saturation = _saturation(step)
        if math.isfinite(saturation) and saturation > 0:
            by_load.setdefault(step.load, []).append(step)
    groups = [group for group in by_load.values() if len(group) > 1]
    if not groups:
        return 0.0, 0
    logs = [np.log([_saturation(step) for step in group]) for group in groups]
    pooled = sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / sum(len(x) - 1 for x in logs)
    sampling = [float(np.var(np.log(_resampled_saturation(step, replicates, rng)))) for group in groups
                for step in group]
    return math.sqrt(max(0.0, pooled - float(np.mean(sampling)))), len(groups)


def merged_by_load(steps: list[Step]) -> list[Step]:
    """One step per load, ascending; steps judged at the same load are read as one (histograms added)."""
    by_load: dict[float, list[Step]] = {}
    for step in steps:
        by_load.setdefault(step.load, []).append(step)
    return [_merge(group) for _, group in sorted(by_load.items())]


def _merge(group: list[Step]) -> Step:
    if len(group) == 1:
        return group[0]
    judged = [s for s in group if s.verdict != NOT_JUDGED] or group
    histograms: dict[str, Any] = {}
    for step in judged:
        for name, histogram in step.histograms.items():
            if name in histograms:
                histograms[name].merge(histogram)
            else:
                histograms[name] = copy.deepcopy(histogram)
    worst = max(judged, key=lambda s: -math.inf if s.saturation is None else s.saturation)
    classes = _reread(worst, histograms)
    failed = sum(s.failed for s in group)
    verdict = worst.verdict if worst.verdict == NOT_JUDGED else (
        OVER if failed or any(c.saturation > 1.0 for c in classes.values()) else WITHIN)
    return Step(**{**vars(worst), "histograms": histograms, "classes": classes, "verdict": verdict,
                   "failed": failed})


def _reread(step: Step, histograms: dict[str, Any]) -> dict[str, Any]:
    """The classes' figures read again from merged histograms (same SLA, more requests)."""
    out = {}
    for name, figures in step.classes.items():
        histogram = histograms.get(name)
        if histogram is None or not histogram.count:
            out[name] = figures
            continue
        out[name] = ClassFigures.of(histogram, figures.sla_p95_ms, figures.sla_p99_ms)
    return out


def _saturation(step: Step) -> float:
    """Not judged reads as over: a load whose p95 was not measured is not known to be within; nor is one at
    which requests failed."""
    return math.inf if step.verdict == NOT_JUDGED or step.saturation is None or step.failed else step.saturation


def _resampled_saturation(step: Step, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """The step's saturation in each bootstrap replicate: the worst of its classes' p95 / SLA p95 (and p99 /
    SLA p99 where the step judged the p99), each class's requests redrawn from its merged histogram."""
    if step.verdict == NOT_JUDGED or not step.classes or step.failed:
        return np.full(replicates, np.inf)
    ratios = []
    for name, figures in step.classes.items():
        histogram = step.histograms.get(name)
        if histogram is None or figures.sla_p95_ms <= 0:
            continue
        ratios.append(histogram.bootstrap_quantile(0.95, replicates, rng) * 1000.0 / figures.sla_p95_ms)
        if figures.p99_judged:
            ratios.append(histogram.bootstrap_quantile(0.99, replicates, rng) * 1000.0 / figures.sla_p99_ms)
    return np.max(np.stack(ratios), axis=0) if ratios else np.full(replicates, np.inf)


def _crossing(loads: np.ndarray, saturation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per replicate (rows of ``saturation``, one column per load ascending): the load where saturation
    first crosses 1.0, interpolated from the step below it (load 0 at saturation 0), rounded down; and
    whether no step crossed (the answer is then the highest load, a lower bound)."""
    over = saturation > 1.0
    crossed = over.any(axis=1)
    first = np.where(crossed, over.argmax(axis=1), len(loads) - 1)
    rows = np.arange(saturation.shape[0])
    below_load = np.where(first > 0, loads[np.maximum(first - 1, 0)], 0.0)
    below_sat = np.where(first > 0, saturation[rows, np.maximum(first - 1, 0)], 0.0)
    hi_load, hi_sat = loads[first], saturation[rows, first]
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(np.isfinite(hi_sat), (1.0 - below_sat) / (hi_sat - below_sat), 0.0)
    crossing = below_load + np.clip(fraction, 0.0, 1.0) * (hi_load - below_load)
    # Never the failing load itself: the answer is below the first load over the SLA.
    crossing = np.where(crossed, np.minimum(np.floor(crossing), hi_load - 1), hi_load)
    return np.maximum(crossing, 0.0), ~crossed


def _limit(curve: list[Step], load: int) -> str | None:
    """The class that limited the answer: from the highest step judged at or below it, or, when even the
    lowest load was over, from that lowest step."""
    below = [s for s in curve if s.load <= load and s.verdict != NOT_JUDGED]
    judged = below[-1:] or [s for s in curve if s.classes][:1]
    if not judged:
        return None
    step = judged[0]
    name = step.limiting
    if name is None:
        return None
    part = f", mostly {_words(step.dominant)}" if step.dominant else ""
    return f"{name}: {step.classes[name].limit()}{part}"


def _words(part: str | None) -> str:
    return "queue wait for a worker" if part == "queue" else f"{part} time"
