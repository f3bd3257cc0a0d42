"""The cache's instants (demotions, evictions, promotions, read outcomes, counters, verification time): each
is part of the request it happened in, else of the measured window while it is open.

A mixin of ``Telemetry`` (measure/telemetry.py), which books requests and device commands: these methods
route one event to the thread's request tally (``Telemetry._tally``) or, outside a request, book it in the
window (``Telemetry.book``), so the telemetry module keeps to the booking rules themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kvbench_core.engine.measure.records import RequestTally


class Instants:
    """Cache events and counts; the attributes and the methods declared below are ``Telemetry``'s."""

    _lock: threading.Lock
    measuring: bool
    _clock: Callable[[], float]
    phase: Callable[[float], str]
    counters: dict[str, int]
    verify_seconds: float
    verified_bytes: int
    _tally: Callable[[], RequestTally | None]
    book: Callable[[RequestTally | None, str | None], None]

    def _in_window(self) -> bool:
        """Measuring, and now is inside the window: before it closed, and before its planned end."""
        return self.measuring and self.phase(self._clock()) == "window"

    def record_demotion(self, src: str, dst: str, nbytes: int) -> None:
        self._event(RequestTally(demotions=[(f"{src}->{dst}", nbytes)]))

    def record_eviction_delete(self) -> None:
        self._event(RequestTally(evictions_deleted=1))

    def record_promotion(self) -> None:
        self._event(RequestTally(promotions=1))

    def _event(self, event: RequestTally) -> None:
        """A cache event: part of the request it happened in, else of the window it happened in."""
        tally = self._tally()
        if tally is None:
            if self._in_window():
                self.book(event, "window")
            return
        tally.demotions += event.demotions
        tally.evictions_deleted += event.evictions_deleted
        tally.promotions += event.promotions

    def record_read_outcome(self, tier: str | None) -> None:
        tally = self._tally()
        if tally is not None:
            tally.outcomes.append(tier)
            return
        if self._in_window():
            self.book(RequestTally(outcomes=[tier]), "window")

    def count(self, name: str, n: int = 1) -> None:
        tally = self._tally()
        if tally is not None:
            tally.counts[name] += n
        elif self._in_window():
            with self._lock:
                self.counters[name] += n

    def record_verify(self, seconds: float, nbytes: int) -> None:
        tally = self._tally()
        if tally is not None:
            tally.verified_bytes += nbytes
            tally.verify_seconds += seconds
        elif self._in_window():
            with self._lock:
                self.verify_seconds += seconds
                self.verified_bytes += nbytes
