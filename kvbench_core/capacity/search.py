"""Which load to judge next: double while every step is within the SLA, then bisect the bracket.

``lo`` is the highest load judged within, ``hi`` the lowest judged over (or not judged).  Doubling from the
start finds a bracket in log2(answer) steps; bisection narrows it until ``hi - lo`` is at most
``resolution`` of ``lo`` (and at least one user), so the search costs about 2*log2(answer) steps whatever
the answer is, and the plan can say how many fit the budget before it starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Bisection:
    """Doubling then bisection over whole loads in ``[1, ceiling]`` (users, or percents of an arrival rate)."""

    start: int
    ceiling: int
    resolution: float = 0.05  # stop when hi - lo <= max(1, resolution * lo)
    lo: int = 0  # highest load within the SLA (0: none yet)
    hi: int | None = None  # lowest load over it (None: none yet)
    done: bool = False

    def next(self, load: int, within: bool) -> int | None:
        """The load to judge after ``load`` was judged (``within`` its SLA or not); None when the search is done."""
        if within:
            self.lo = max(self.lo, load)
        else:
            self.hi = load if self.hi is None else min(self.hi, load)
        if self.hi is None:
            if load >= self.ceiling:
                self.done = True
                return None
            return min(self.ceiling, max(load + 1, load * 2))
        if self.hi - self.lo <= max(1, math.floor(self.resolution * self.lo)):
            self.done = True
            return None
        return (self.lo + self.hi) // 2 if self.lo else max(1, self.hi // 2)

    def bracket(self, unit: str = "users") -> str:
        """The state in words, for the plan and a search the budget ended."""
        if self.hi is None:
            return f"within at {self.lo} {unit}, nothing over yet" if self.lo else "nothing judged yet"
        return f"within at {self.lo}, over at {self.hi} {unit}" if self.lo else f"over already at {self.hi} {unit}"


def steps_needed(start: int, ceiling: int, resolution: float) -> int:
    """The most steps a search from ``start`` needs: doubling up to ``ceiling``, then bisecting that
    bracket down to the resolution (for the plan: how many steps the budget must hold)."""
    doubling = max(0, math.ceil(math.log2(max(ceiling, start) / start))) + 1
    width = max(ceiling - ceiling // 2, 1)
    tolerance = max(1, math.floor(resolution * (ceiling // 2)))
    return doubling + max(0, math.ceil(math.log2(width / tolerance)))
