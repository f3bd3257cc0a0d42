"""The ``sla_search`` autoscaler: the search ``kvbench capacity`` runs, inside one run (docs/autoscaling.md).

It holds each user count as a judged step (kvbench_core/capacity/step.py) until every class has
``min_requests`` completed requests, doubles the users while every step is within the SLA, then bisects
between the highest load within and the lowest over it (capacity/search.py).  The users change live in
the run's user pool, so the cache stays warm and no step pays a set-up; the run's duration is the budget.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kvbench_core.builtins.autoscalers import MIN_P95_REQUESTS, judged_summary
from kvbench_core.capacity.search import Bisection
from kvbench_core.capacity.step import WITHIN, JudgedStep, Step
from kvbench_core.contracts.autoscaler import Autoscaler, Decision, TelemetrySample

#: A step longer than this without its requests is not judged (and counts as over the SLA).
MAX_STEP_S = 60.0


class SLASearchAutoscaler(Autoscaler):
    """Highest user count at which every QoS class's service p95 is within its SLA: doubling, then bisection."""

    name = "sla_search"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False,
        "properties": {
            "interval_s": {"type": "number", "exclusiveMinimum": 0, "default": 5.0,
                           "description": "seconds between looks at a step: its shortest length"},
            "min_requests": {"type": "integer", "minimum": 1, "default": MIN_P95_REQUESTS,
                             "description": "completed requests every class needs before a step is judged"},
            "max_step_s": {"type": "number", "exclusiveMinimum": 0, "default": MAX_STEP_S,
                           "description": "a step without its requests after this long is not judged (over)"},
            "resolution": {"type": "number", "minimum": 0, "default": 0.05,
                           "description": "stop when the bracket is at most this share of its lower end"},
        },
    }

    def __init__(self, options: dict[str, Any], *, initial_users: int, max_users: int) -> None:
        super().__init__(options, initial_users=initial_users, max_users=max_users)
        self.min_requests = int(self.options["min_requests"])
        self.max_step_s = float(self.options["max_step_s"])
        self.search = Bisection(initial_users, max(max_users, initial_users), float(self.options["resolution"]))
        self.users = initial_users
        self.steps: list[Step] = []
        self._step = self._new_step(0.0)

    def _new_step(self, started_s: float) -> JudgedStep:
        return JudgedStep(self.users, started_s, min_requests=self.min_requests, max_step_s=self.max_step_s)

    def decide(self, sample: TelemetrySample) -> Decision:
        if self.search.done:
            return Decision(self.users, "found", converged=True, reason="search finished")
        self._step.add(sample)
        short = self._step.shortfall()
        if short is not None and not self._step.timed_out():
            return Decision(self.users, "hold", reason=f"step at {self.users} users not judged yet: {short}")
        step = self._step.judge()
        self.steps.append(step)
        following = self.search.next(int(step.load), step.verdict == WITHIN)
        if following is None:
            return Decision(self.users, "found", step.saturation, converged=True,
                            reason=f"{step.verdict} at {step.load:g} users ({step.reason}); "
                                   f"search finished: {self.search.bracket()}")
        action = "scale_up" if following > self.users else "scale_down"
        self.users = following
        self._step = self._new_step(sample.t_s)
        return Decision(self.users, action, step.saturation,
                        reason=f"{step.verdict} at {step.load:g} users ({step.reason}); {self.search.bracket()}")

    def summary(self) -> dict[str, Any]:
        return {**judged_summary(self.steps), "final_users": self.users, "search_finished": self.search.done,
                "bracket": self.search.bracket()}
