"""The answer of several searches of one spec, and the interval the next search lands in.

One search's interval (capacity/interval.py) holds what that search can see: its requests' sampling and
the drift between its own judgements of a load, seconds apart.  On a shared machine the answer moves more
than that between searches minutes apart (docs/autoscaling.md: 150-166 users in six searches whose own
intervals were 1-25 % wide), and no single search can measure that.  ``kvbench capacity --repeats N``
measures it the direct way, as MLPerf's repeated runs do: N searches in a row, and the interval a further
search's answer lands in with 95 % probability, the prediction interval of N answers:

    mean +- t(0.975, N - 1) x sd x sqrt(1 + 1/N)

(Student's t, the answers' sample standard deviation).  It is wide for few searches (t = 4.30 at N = 3)
because three answers say little about their spread; it never comes out narrower than a typical search's
own interval (the median of their half-widths), which holds the sampling whatever the answers say.  Not
the widest: one search whose re-measures disagreed (an interval of 6-228 around 62) would set it alone.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kvbench_core.capacity.interval import KEYS

#: Student's t, two-sided 95 % (the 97.5th percentile), by degrees of freedom; the normal's 1.96 past 30.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
NORMAL_975 = 1.96


def t_975(dof: int) -> float:
    """The t quantile for ``dof`` degrees of freedom: the table's entry at or below it (wider: safe side)."""
    if dof > max(T_975):
        return NORMAL_975
    return T_975[max(d for d in T_975 if d <= dof)]


@dataclass(frozen=True)
class RepeatedAnswer:
    """The mean answer of ``answers`` and the 95 % interval of the next search's answer."""

    answers: tuple[int, ...]
    load: int
    ci_low: int
    ci_high: int

    @classmethod
    def of(cls, answers: list[int], intervals: list[tuple[int, int]]) -> RepeatedAnswer:
        """From two or more searches' answers and their own intervals (``(low, high)`` each)."""
        if len(answers) < 2:
            raise ValueError("a prediction interval needs at least two searches")
        answers = [int(a) for a in answers]
        mean = statistics.fmean(answers)
        reach = t_975(len(answers) - 1) * statistics.stdev(answers) * math.sqrt(1 + 1 / len(answers))
        own = statistics.median((high - low) / 2 for low, high in intervals) if intervals else 0.0
        reach = max(reach, own)
        return cls(tuple(answers), math.floor(mean), max(0, math.floor(mean - reach)), math.ceil(mean + reach))

    def as_dict(self, load_kind: str = "users") -> dict[str, object]:
        """The record ``--json`` prints above the searches' own."""
        return {"load_kind": load_kind, KEYS[load_kind]: self.load, "ci95": [self.ci_low, self.ci_high],
                "answers": list(self.answers), "method": self.method()}

    def method(self) -> str:
        return (f"where the next search lands: the prediction interval of {len(self.answers)} searches' answers "
                f"(mean +- t(0.975, {len(self.answers) - 1}) x sd x sqrt(1 + 1/{len(self.answers)})), at least "
                "as wide as the median search's own interval")

    def line(self, load_kind: str = "users") -> str:
        """``max users within SLA over 3 searches: 158 (95 % CI for a further search 116-200; answers ...)``."""
        noun, unit = ("users", "") if load_kind == "users" else ("arrival rate", " %")
        answers = ", ".join(f"{a}{unit}" for a in self.answers)
        return (f"max {noun} within SLA over {len(self.answers)} searches: {self.load}{unit} (95 % CI for a "
                f"further search {self.ci_low}-{self.ci_high}{unit}; answers {answers})")
