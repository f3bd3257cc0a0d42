"""Which load to judge next: double while every step is within the SLA, then bisect the bracket.

``lo`` is the highest load judged within, ``hi`` the lowest judged over (or not judged).  Doubling from the
start finds a bracket in log2(answer) steps; bisection narrows it until ``hi - lo`` is at most
``resolution`` of ``lo`` (and at least one user), so the search costs about 2*log2(answer) steps whatever
the answer is, and the plan can say how many fit the budget before it starts.

With ``remeasure`` (the measured search: ``sla_search``), once the bracket has closed its two ends are
judged once more: the same load measured minutes apart is how far the machine drifts between steps, and
the answer's interval widens by that disagreement (capacity/interval.py), so that a repeat of the whole
search lands inside it.  The re-measures do not move the bracket; the answer reads them merged with the
first measurements.  A simulated search (the forecast) has no drift to measure: it does not re-measure.
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
    remeasure: bool = False  # judge lo and hi once more after the bracket closes (see above)
    again: list[int] | None = None  # the re-measures still to judge (None: the bracket has not closed)

    def next(self, load: int, within: bool) -> int | None:
        """The load to judge after ``load`` was judged (``within`` its SLA or not); None when the search is done."""
        if self.again is not None:  # a re-measure: the bracket stays as first judged
            return self._remeasure_next()
        if within:
            self.lo = max(self.lo, load)
        else:
            self.hi = load if self.hi is None else min(self.hi, load)
        if self.hi is None:
            if load >= self.ceiling:
                return self._closed(load)
            return min(self.ceiling, max(load + 1, load * 2))
        if self.hi - self.lo <= max(1, math.floor(self.resolution * self.lo)):
            return self._closed(load)
        return (self.lo + self.hi) // 2 if self.lo else max(1, self.hi // 2)

    def _closed(self, last: int) -> int | None:
        """The bracket is closed: its ends once more where re-measuring (the one not judged ``last`` first,
        so the two measurements of a load are apart), else the search is done."""
        ends = [end for end in (self.lo, self.hi) if end] if self.remeasure else []
        self.again = sorted(ends, key=lambda end: end == last)
        return self._remeasure_next()

    def _remeasure_next(self) -> int | None:
        assert self.again is not None
        if self.again:
            return self.again.pop(0)
        self.done = True
        return None

    @property
    def remeasuring(self) -> bool:
        """Whether the bracket has closed and its ends are being judged again."""
        return self.again is not None and not self.done

    def bracket(self, unit: str = "users") -> str:
        """The state in words, for the plan and a search the budget ended."""
        if self.hi is None:
            return f"within at {self.lo} {unit}, nothing over yet" if self.lo else "nothing judged yet"
        return f"within at {self.lo}, over at {self.hi} {unit}" if self.lo else f"over already at {self.hi} {unit}"


#: The loads a measured search judges again once its bracket has closed: its two ends.
REMEASURES = 2


def steps_needed(start: int, ceiling: int, resolution: float) -> int:
    """The most steps a measured search from ``start`` needs: doubling up to ``ceiling``, bisecting that
    bracket down to the resolution, then the bracket's two ends again (for the plan: how many steps the
    budget must hold)."""
    doubling = max(0, math.ceil(math.log2(max(ceiling, start) / start))) + 1
    width = max(ceiling - ceiling // 2, 1)
    tolerance = max(1, math.floor(resolution * (ceiling // 2)))
    return doubling + max(0, math.ceil(math.log2(width / tolerance))) + REMEASURES
