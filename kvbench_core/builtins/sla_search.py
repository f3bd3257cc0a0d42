"""The ``sla_search`` autoscaler: the search ``kvbench capacity`` runs, inside one run (docs/autoscaling.md).

It holds each user count as a judged step (kvbench_core/capacity/step.py) until every class has
``min_requests`` completed requests, doubles the users while every step is within the SLA, then bisects
between the highest load within and the lowest over it, then judges those two loads once more, so the
answer's interval holds the machine's drift between steps as well as each step's sampling (capacity/search.py,
capacity/interval.py).  The users change live in
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
#: Open loop: the search's loads are percents of the source's arrival rate, up to this many times it.
OPEN_LOOP_CEILING = 64


class SLASearchAutoscaler(Autoscaler):
    """Highest load at which every QoS class's service latency is within its SLA: doubling, then bisection.

    Closed loop, the load is the user count; open loop (the first sample says which), the arrival rate as a
    percent of the source's own (100 = as the spec says it), set through ``Decision.arrival_scale``."""

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
        self.resolution = float(self.options["resolution"])
        self.search = Bisection(initial_users, max(max_users, initial_users), self.resolution, remeasure=True)
        self.users = self.load = initial_users
        self.open_loop: bool | None = None  # the first sample says
        self.steps: list[Step] = []
        #: Classes that completed requests at some judged load: at a later load a class with none is starved
        #: (a lower priority's requests never reach a worker), which is over, not a class to leave out.
        self.served_classes: set[str] = set()
        self._step = self._new_step(0.0)

    def _new_step(self, started_s: float) -> JudgedStep:
        return JudgedStep(self.load, started_s, min_requests=self.min_requests, max_step_s=self.max_step_s,
                          expected=self.served_classes)

    def _first(self, sample: TelemetrySample) -> None:
        """An open loop's load is its arrival rate: search percents of the source's, from 100."""
        self.open_loop = sample.open_loop
        if self.open_loop:
            self.load = 100
            self.search = Bisection(100, 100 * OPEN_LOOP_CEILING, self.resolution, remeasure=True)
            self._step = self._new_step(self._step.started_s)

    def _decision(self, action: str, saturation: float | None = None, **rest: Any) -> Decision:
        scale = self.load / 100 if self.open_loop else None
        return Decision(self.users, action, saturation, arrival_scale=scale, **rest)

    def decide(self, sample: TelemetrySample) -> Decision:
        if self.open_loop is None:
            self._first(sample)
        if self.search.done:
            return self._decision("found", converged=True, reason="search finished")
        self._step.add(sample)
        short = self._step.shortfall()
        unit = self.unit
        if short is not None and not self._step.timed_out():
            return self._decision("hold", reason=f"step at {self.load} {unit} not judged yet: {short}")
        step = self._step.judge()
        self.steps.append(step)
        self.served_classes.update(q for q, h in step.histograms.items() if h.count)
        following = self.search.next(int(step.load), step.verdict == WITHIN)
        judged = f"{step.verdict} at {step.load:g} {unit} ({step.reason})"
        if following is None:
            return self._decision("found", step.saturation, converged=True,
                                  reason=f"{judged}; search finished: {self.search.bracket(unit)}")
        action = "scale_up" if following > self.load else "scale_down" if following < self.load else "hold"
        if self.search.remeasuring:
            judged += f"; the bracket closed, {following} {unit} judged again (the drift between steps)"
        self.load = following
        if not self.open_loop:
            self.users = following
        self._step = self._new_step(sample.t_s)
        return self._decision(action, step.saturation, reason=f"{judged}; {self.search.bracket(unit)}")

    @property
    def unit(self) -> str:
        return "% of the arrival rate" if self.open_loop else "users"

    def summary(self) -> dict[str, Any]:
        return {**judged_summary(self.steps, "arrival_rate_percent" if self.open_loop else "users"),
                "final_users": self.users, "search_finished": self.search.done,
                "bracket": self.search.bracket(self.unit)}
