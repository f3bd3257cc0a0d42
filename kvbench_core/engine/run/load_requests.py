"""The requests an autoscaler decision judges: those issued at the current load since the last decision.

A judged step (kvbench_core/capacity/step.py) needs the step's own requests: their service latencies
as one histogram per QoS class (merged bucket counts, never the worst of the 1 s points' p95s) and where
their time went.  A request issued before the load last changed was issued at another load, so it is left
out even when it finishes inside the step; so is one issued while such a request was still outstanding,
because it queued behind the old load's work (after a step down from 6 users to 5 the first requests wait
for 6, and a 20-request step's p95 is one of them).  The step's requests are those issued once the old
load's last request had finished.  The scheduler thread alone books here (``RunLoop._submit``,
``finishing.book_finished``), so nothing is locked.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.run.workers import Finished


class LoadRequests:
    """Per-class service histograms and the time split of the requests issued since ``since``."""

    def __init__(self, since: float) -> None:
        self.since = since  # requests enqueued before this are the old load's, or queued behind it
        # Issued here and not finished yet, by their enqueue instant (what ``Finished.enqueued`` reads back):
        # a request this never saw issued (warm-up's) cannot hold a step unsettled.
        self._outstanding: Counter[float] = Counter()
        self._old = 0  # of those, issued before the load last changed
        self._changed_at = since
        self._reset()

    def _reset(self) -> None:
        self.service: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
        self.split_s: dict[str, float] = defaultdict(float)
        self.failed = 0  # requests of this load whose storage failed or found no room: not served at all

    def load_changed(self, now: float) -> None:
        """The user count changed at ``now``: requests issued from here count once the old ones finished."""
        self._changed_at = now
        self._old = sum(n for enqueued, n in self._outstanding.items() if enqueued < now)
        self.since = math.inf if self._old else now

    def issued(self, now: float) -> None:
        """A request enqueued at ``now``."""
        self._outstanding[now] += 1

    def finished(self, done: Finished) -> None:
        """Any request that ended (completed, failed or cancelled): the old load's last one settles the step;
        a failed one of this load is counted (a load at which requests fail is not one the system carries)."""
        if done.kind in ("failed", "write_failed") and done.enqueued >= self.since:
            self.failed += 1
        if not self._outstanding.get(done.enqueued):
            return
        self._outstanding[done.enqueued] -= 1
        if not self._outstanding[done.enqueued]:
            del self._outstanding[done.enqueued]
        if self._old and done.enqueued < self._changed_at:
            self._old -= 1
            if self._old == 0:
                self.since = done.served

    def add(self, done: Finished) -> None:
        """A request that completed inside the measured window."""
        if done.enqueued < self.since or done.outcome is None:
            return
        self.service[done.request.qos].add(done.served - done.began)
        self.split_s["queue"] += done.started - done.began
        for record in done.outcome.tally.ops if done.outcome.tally is not None else ():
            if record.timing.transferred:
                device = min(record.timing.device, record.timing.total)
                self.split_s[f"{record.tier} {record.op} device"] += device
                self.split_s[f"{record.tier} {record.op} host"] += record.timing.total - device

    def take(self) -> tuple[dict[str, LatencyHistogram], dict[str, float], int]:
        """What was booked since the last decision (histograms, time split, failed requests); the next
        decision starts empty."""
        taken = dict(self.service), dict(self.split_s), self.failed
        self._reset()
        return taken
