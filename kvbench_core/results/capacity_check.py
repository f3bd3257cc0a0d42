"""The invariant of a judged search's answer: it is what its own steps say (docs/metrics.md, "Capacity").

The result keeps every judged step with its merged per-class histograms, so the answer and its 95 % CI are
computed again from them by the one rule (kvbench_core/capacity/interval.py) and must come out the same:
an answer edited in the file, or one the steps do not support, fails the run's checks and ``kvbench check``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvbench_core.capacity.interval import KEYS, answer
from kvbench_core.capacity.step import Step
from kvbench_core.engine.measure.histogram import LatencyHistogram


def capacity_answer(result: dict[str, Any], check: Any) -> Iterator[Any]:
    """``check(name, expected, observed, detail)`` for the answer and each end of its interval."""
    summary = (result.get("autoscaling") or {}).get("summary") or {}
    kind = summary.get("load_kind") or "users"
    if not isinstance(summary.get("steps"), list) or KEYS.get(kind) not in summary:
        return
    steps = [Step.from_dict(step, LatencyHistogram.from_dict) for step in summary["steps"]]
    derived = answer(steps)
    recorded_low, recorded_high = summary.get("ci95") or (None, None)
    for name, expected, observed in (("capacity_answer", derived.load, summary[KEYS[kind]]),
                                     ("capacity_ci_low", derived.ci_low, recorded_low),
                                     ("capacity_ci_high", derived.ci_high, recorded_high)):
        if expected is not None:
            yield check(name, expected, observed, f"{name.replace('_', ' ')} re-derived from the judged steps' "
                                                  "merged histograms (capacity/interval.py)")
