"""The built-in ``qos`` and ``capacity`` autoscalers (seed §3.12).

Both see only the ``TelemetrySample`` the runner hands every autoscaler, so a
third-party autoscaler plugin has exactly the same powers.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from kvbench_core.capacity.interval import answer
from kvbench_core.capacity.step import JudgedStep, Step
from kvbench_core.contracts.autoscaler import Autoscaler, Decision, TelemetrySample
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.validation import with_defaults

_POSITIVE = {"type": "number", "exclusiveMinimum": 0}
_RATIO = {"type": "number", "minimum": 0}


#: The fewest samples whose p95 is not their maximum: by the nearest rank, p95 of 20 is the 19th.
MIN_P95_REQUESTS = 20


def judged_summary(steps: list[Step], load_kind: str = "users") -> dict[str, Any]:
    """What an autoscaler that judges steps reports: the answer, its interval and the curve it measured
    (``autoscaling.summary`` in the result; docs/autoscaling.md).  ``load_kind``: ``users``, or
    ``arrival_rate_percent`` (an open loop's arrival rate, in percent of the source's)."""
    return {**answer(steps).as_dict(load_kind), "load_kind": load_kind, "steps": [step.as_dict() for step in steps]}


class QoSAutoscaler(Autoscaler):
    """Largest user count that keeps every QoS class inside its SLA.

    Saturation is the worst class's p95 *service* latency (enqueued
    until its storage work is done) divided by its p95 target (1.0 = exactly at
    the SLA).  Not end-to-end: that includes the simulated generation time
    (30 ms/token with ``realistic`` pacing, 1.5 s for a 50-token reply), which
    no storage can shorten and which alone exceeds every class's target.  Below ``low`` add users, between ``low`` and
    ``high`` hold, above ``high`` remove users and cool down; the band defaults
    to ``target_saturation`` (0.8) +- 0.1.  After
    ``stable_intervals`` consecutive holds the count is reported as stabilised.
    Each user count is a judged step (kvbench_core/capacity/step.py), the same as
    ``kvbench capacity`` judges: held, and not counted towards stabilising, until
    every class has ``min_interval_requests`` completed requests at it, then judged
    on their merged histograms: by the nearest rank the p95 of fewer than 20
    requests is the slowest one, so a single slow request would step the users down.
    ``max_users_within_sla`` is the answer the judged steps give (capacity/interval.py).
    """

    name = "qos"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False,
        "properties": {
            "interval_s": {**_POSITIVE, "default": 5.0},
            "target_saturation": {**_RATIO, "default": 0.8},
            "low": {**_RATIO, "description": "scale up below this saturation (default target_saturation - 0.1)"},
            "high": {**_RATIO, "description": "scale down above this saturation (default target_saturation + 0.1)"},
            "step_up": {**_RATIO, "default": 0.15}, "step_down": {**_RATIO, "default": 0.10},
            "cooldown_s": {**_RATIO, "default": 30.0},
            "stable_intervals": {"type": "integer", "minimum": 1, "default": 3},
            "min_users": {"type": "integer", "minimum": 1, "default": 1},
            "min_interval_requests": {
                "type": "integer", "minimum": 1, "default": MIN_P95_REQUESTS,
                "description": "judge a step only once every class has this many completed requests in it "
                               "(default 20: the fewest whose p95 is not simply the slowest request)"},
        },
    }

    def __init__(self, options: dict[str, Any], *, initial_users: int, max_users: int) -> None:
        super().__init__(options, initial_users=initial_users, max_users=max_users)
        self.low, self.high = self.band(self.options)
        self.step_up = float(self.options["step_up"])
        self.step_down = float(self.options["step_down"])
        self.cooldown_s = float(self.options["cooldown_s"])
        self.stable_intervals = int(self.options["stable_intervals"])
        self.min_users = int(self.options["min_users"])
        self.min_interval_requests = int(self.options["min_interval_requests"])
        self.users = initial_users
        self._cooldown_until = -math.inf
        self._holds = 0
        self.steps: list[Step] = []
        self._step = self._new_step(0.0)

    def _new_step(self, started_s: float) -> JudgedStep:
        return JudgedStep(self.users, started_s, min_requests=self.min_interval_requests, max_step_s=math.inf)

    @classmethod
    def band(cls, options: dict[str, Any]) -> tuple[float, float]:
        """``(low, high)``: the seed compares saturation with the target (0.8) and holds within +-0.1 of it;
        the edges follow the target, so their defaults are derived here, not in the schema."""
        full = with_defaults(cls.options_schema, options)
        target = float(full["target_saturation"])
        return float(full.get("low", round(target - 0.1, 9))), float(full.get("high", round(target + 0.1, 9)))

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str = "autoscaler.options") -> None:
        low, high = cls.band(options)
        if low > high:
            raise SpecError(f"{path}.low: {low:g} is above high ({high:g}); the autoscaler adds users below low, "
                            "removes them above high and holds between them")

    def decide(self, sample: TelemetrySample) -> Decision:
        self._step.add(sample)
        if sample.t_s < self._cooldown_until:
            return Decision(self.users, "cooldown", None, reason="cooling down after a scale-down")
        short = self._step.shortfall()
        if short is not None:
            return Decision(self.users, "hold", None, reason=f"not judged: {short} for a p95 that is not just "
                                                             "the slowest one")
        step = self._step.judge()
        self.steps.append(step)
        decision = (Decision(self.users, "hold", None, reason=f"not judged: {step.reason}")
                    if step.saturation is None else self._band(sample, step.saturation))
        self._step = self._new_step(sample.t_s)  # at the users just decided
        return decision

    def _band(self, sample: TelemetrySample, saturation: float) -> Decision:
        """The seed's band rule on a judged step's saturation."""
        if saturation < self.low and self.users < self.max_users:
            self._holds = 0
            self.users = min(self.max_users, max(self.users + 1, math.ceil(self.users * (1 + self.step_up))))
            return Decision(self.users, "scale_up", saturation, reason=f"saturation {saturation:.2f} < {self.low}")
        if saturation > self.high:
            self._holds = 0
            self.users = max(self.min_users, min(self.users - 1, math.floor(self.users * (1 - self.step_down))))
            self._cooldown_until = sample.t_s + self.cooldown_s
            return Decision(self.users, "scale_down", saturation,
                            reason=f"saturation {saturation:.2f} > {self.high}")
        self._holds += 1
        if self._holds >= self.stable_intervals:
            return Decision(self.users, "stabilized", saturation, converged=True,
                            reason=f"held {self._holds} judged steps inside the SLA band")
        return Decision(self.users, "hold", saturation, reason=f"saturation {saturation:.2f} in band")

    def summary(self) -> dict[str, Any]:
        return {**judged_summary(self.steps), "final_users": self.users}


#: The seed samples every 5 s; a capacity stage shorter than that measures noise, not the storage.
MIN_STAGE_S = 5.0
#: A stage with fewer completed requests than this is extended, not judged (a dip of a few requests
#: would otherwise end the search at its first stages).
MIN_STAGE_REQUESTS = 10


class CapacityAutoscaler(Autoscaler):
    """Peak throughput regardless of latency (the seed's capacity mode): double users while throughput
    grows fast, then x1.5, stop when throughput falls below the previous stage and report the best stage.
    A stage lasts ``interval_s`` (at least 5 s, the seed's sampling period) and is only judged once it has
    ``min_stage_requests`` completed requests; throughput is generated tokens per second."""

    name = "capacity"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False,
        "properties": {"interval_s": {"type": "number", "minimum": MIN_STAGE_S, "default": 10.0},
                       "fast_growth": {**_RATIO, "default": 0.2}, "fine_factor": {**_POSITIVE, "default": 1.5},
                       "ramp_factor": {**_POSITIVE, "default": 2.0},
                       "min_stage_requests": {"type": "integer", "minimum": 1, "default": MIN_STAGE_REQUESTS}},
    }

    def __init__(self, options: dict[str, Any], *, initial_users: int, max_users: int) -> None:
        super().__init__(options, initial_users=initial_users, max_users=max_users)
        self.fast_growth = float(self.options["fast_growth"])
        self.ramp_factor = float(self.options["ramp_factor"])
        self.fine_factor = float(self.options["fine_factor"])
        self.min_stage_requests = int(self.options["min_stage_requests"])
        self.users = initial_users
        self._previous: float | None = None
        self._best = (0.0, initial_users)
        self._done = False

    def decide(self, sample: TelemetrySample) -> Decision:
        throughput = sample.generated_tokens_per_s
        if self._done:
            return Decision(self.users, "peak_found", converged=True, reason="Peak capacity found")
        if sample.requests < self.min_stage_requests:
            return Decision(self.users, "hold", reason=f"stage extended: {sample.requests} requests "
                                                      f"< {self.min_stage_requests} to judge it by")
        if throughput > self._best[0]:
            self._best = (throughput, self.users)
        previous, self._previous = self._previous, throughput
        if previous is not None and throughput < previous:
            self._done = True
            self.users = self._best[1]
            return Decision(self.users, "peak_found", converged=True, reason="Peak capacity found",
                            extra={"peak_generated_tokens_per_s": self._best[0], "peak_users": self._best[1]})
        if self.users >= self.max_users:
            self._done = True
            return Decision(self.users, "peak_found", converged=True, reason="Reached max_users",
                            extra={"peak_generated_tokens_per_s": self._best[0], "peak_users": self._best[1]})
        growth = math.inf if not previous else (throughput - previous) / previous
        factor = self.ramp_factor if growth >= self.fast_growth else self.fine_factor
        self.users = min(self.max_users, max(self.users + 1, math.ceil(self.users * factor)))
        action = "scale_up" if factor == self.ramp_factor else "fine_tune"
        return Decision(self.users, action, reason=f"throughput growth {growth:.0%}" if previous else "first stage")

    def summary(self) -> dict[str, Any]:
        return {"peak_generated_tokens_per_s": self._best[0], "peak_users": self._best[1],
                "reason": "Peak capacity found" if self._done else "search not finished"}
