"""The measurement window: warm-up, the measured duration, the drain limit after it, and why a run stops.

Timeline of one run (monotonic clock)::

    start ── warm-up ──▶ open ──── duration ────▶ close ── drain (≤ drain limit) ──▶ end
                          │ measured window      │ no new work; in-flight work finishes,
                          │ (headline figures)   │ reported apart; then cancelled at a
                                                   command boundary

``duration`` bounds the run: at ``close`` nothing new is issued; what is in flight may finish for at most
the drain limit (``drain_timeout``: default 10 % of the duration, between 1 s and 30 s, so a long run's
last large entries can land and a short one is not held up), then it is cancelled.  So a run lasts at
most start-up + warm-up + duration + drain limit.
"""

from __future__ import annotations

from dataclasses import dataclass

DRAIN_SHARE = 0.10
DRAIN_MIN_S = 1.0
DRAIN_MAX_S = 30.0
#: After cancelling, how long in-flight operations get to reach their next command boundary.
CANCEL_GRACE_S = 5.0


def default_drain_timeout(duration_s: float | None) -> float:
    """10 % of the duration, at least 1 s, at most 30 s (30 s when the run is bounded by requests)."""
    if duration_s is None:
        return DRAIN_MAX_S
    return min(DRAIN_MAX_S, max(DRAIN_MIN_S, DRAIN_SHARE * duration_s))


@dataclass
class MeasurementWindow:
    """When the window opens and closes, and whether a stop condition of the spec has been reached.  Built
    with the run's other parts before any work (engine/run/parts.py); its clock starts with ``start``."""

    warmup_s: float = 0.0
    duration_s: float | None = None
    request_limit: int | None = None
    drain_timeout_s: float = DRAIN_MAX_S
    opened_at: float | None = None
    closed_at: float | None = None
    started_at: float | None = None  # the scheduler issued its first request: warm-up began

    def start(self, now: float) -> None:
        self.started_at = now

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None and self.closed_at is None

    def due_to_open(self, now: float) -> bool:
        return self.opened_at is None and self.started_at is not None and now >= self.started_at + self.warmup_s

    def open(self, now: float) -> None:
        self.opened_at = now

    def close(self, now: float) -> None:
        if self.closed_at is None:
            self.closed_at = now

    def stop_reason(self, now: float, completed: int) -> str | None:
        """The spec's own stop condition, once reached: the duration is over, or the request count."""
        if self.opened_at is None:
            return None
        if self.duration_s is not None and now >= self.opened_at + self.duration_s:
            return "duration reached"
        if self.request_limit is not None and completed >= self.request_limit:
            return "request count reached"
        return None

    def drain_deadline(self) -> float:
        assert self.closed_at is not None, "the drain starts when the window closes"
        return self.closed_at + self.drain_timeout_s

    def elapsed(self, now: float) -> float:
        return now - self.opened_at if self.opened_at is not None else 0.0
