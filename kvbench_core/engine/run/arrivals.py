"""The arrival process: closed-loop users with think time, or open-loop arrivals on the source's clock.

Both keep the work that is waiting for a worker bounded (``backlog_limit`` requests), so memory stays
bounded by what is in flight and start-up does not depend on the user count:

- **Closed loop.**  The user pool is users ``0 .. n-1`` (the autoscaler changes ``n``).  A user that is
  ready (never issued yet, or back from think time) is only turned into a request when the backlog has
  room; a million users cost a counter, not a million requests (or RNG streams) at start-up.  A ready
  user held back by a full backlog is waiting for the system all the same, so its request's latency
  starts when it became ready, not when the backlog let it in: otherwise the service time of 1,024 users
  over 8 workers is that of the 64 the backlog admits, and a search never finds the load it cannot carry
  (coordinated omission).
- **Open loop.**  Each arrival is due at ``start + request.arrival_s``.  An arrival that finds the
  backlog full is *dropped* (the offered load the system could not take); one issued more than
  ``LATE_S`` after it was due is *late*.  Both are counted, with the backlog's peak, so a result shows
  offered vs served load instead of queueing without bound.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.workload import Request, WorkloadSource
from kvbench_core.engine.run.scheduler import EventHeap

#: An arrival issued this much after its due time is late (the scheduler or the backlog held it up).
LATE_S = 0.010
#: At most this many open-loop arrivals are taken from the source per scheduler pass, so a trace
#: replayed at infinite speed cannot spin the scheduler forever.
MAX_ARRIVALS_PER_PASS = 1000
#: How arrivals hand a request to the worker pool: (request, now, when its user was ready if earlier).
Submit = Callable[[Request, float, float | None], None]


def backlog_limit(workers: int) -> int:
    """Requests allowed to wait for a worker: enough to keep every worker busy, never unbounded."""
    return max(64, 4 * workers)


@dataclass
class ArrivalStats:
    """Offered vs served load, for the result's ``workload.arrivals`` section."""

    offered: int = 0  # arrivals due inside the measured window (open loop) / requests issued there
    issued: int = 0
    late: int = 0
    dropped: int = 0
    backlog_peak: int = 0
    #: Requests issued in the window per QoS class: a class with issued requests and none served is starved.
    issued_by_qos: dict[str, int] = field(default_factory=dict)
    #: Open loop only: arrivals come on the source's clock, so there is an offered rate (a closed loop's
    #: users issue when served: what they offer is what was served).  The due instants of the counted
    #: arrivals tell a paced replay from one replayed as fast as possible (every arrival due at once).
    open_loop: bool = False
    first_due: float | None = None
    last_due: float | None = None

    def count_offered(self, due: float) -> None:
        self.offered += 1
        self.first_due = due if self.first_due is None else min(self.first_due, due)
        self.last_due = due if self.last_due is None else max(self.last_due, due)

    def offered_rate(self, window_s: float) -> float | None:
        """Arrivals due in the window ÷ the window: None for a closed loop, and for arrivals all due at one
        instant (``speedup: 0``), whose offered rate is unbounded (the count is then the scheduler's passes)."""
        if not self.open_loop or window_s <= 0:
            return None
        if self.offered > 1 and self.first_due == self.last_due:
            return None
        return round(self.offered / window_s, 3)

    def count_issued(self, qos: str) -> None:
        self.issued += 1
        self.issued_by_qos[qos] = self.issued_by_qos.get(qos, 0) + 1

    def as_dict(self, window_s: float, served: int) -> dict[str, Any]:
        def rate(n: int) -> float | None:
            return round(n / window_s, 3) if window_s > 0 else None

        return {"offered": self.offered, "issued": self.issued, "served": served, "late": self.late,
                "dropped": self.dropped, "backlog_peak": self.backlog_peak,
                "offered_per_s": self.offered_rate(window_s), "served_per_s": rate(served),
                "issued_by_qos": dict(sorted(self.issued_by_qos.items()))}


class UserPool:
    """Users ``0 .. count-1``; the autoscaler resizes it.  Costs O(ready users), not O(users).

    Each ready user comes with the instant it became ready (issuing began or the pool grew to take it in,
    its think time ended, the pool grew back over it), which ``take`` returns with it."""

    def __init__(self, count: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.count = count
        self.clock = clock
        self._next_fresh = 0  # users below this have issued at least once
        self._sizes: list[tuple[float, int]] = []  # (instant, count) from ``begin`` on: when fresh users joined
        self._ready: deque[tuple[int, float]] = deque()  # back from think time, in the order they became ready
        self._parked: set[int] = set()  # ready while outside the pool (scaled down): back when it grows
        self.exhausted: set[int] = set()

    def begin(self, now: float) -> None:
        """Issuing begins: every user in the pool is ready from ``now``."""
        self._sizes = [(now, self.count)]

    def __len__(self) -> int:
        return self.count

    def active(self, user: int) -> bool:
        return user < self.count

    def ready(self, user: int, now: float) -> None:
        if self.active(user):
            self._ready.append((user, now))
        else:
            self._parked.add(user)

    def take(self) -> tuple[int, float] | None:
        """The next ready user and the instant it became ready: never-issued users first, then those who have
        waited longest."""
        while self._ready or self._next_fresh < self.count:
            if self._next_fresh < self.count:
                self._next_fresh += 1
                return self._next_fresh - 1, self._fresh_since(self._next_fresh - 1)
            user, since = self._ready.popleft()
            if self.active(user):
                return user, since
            self._parked.add(user)
        return None

    def _fresh_since(self, user: int) -> float:
        """When a never-issued user joined: the earliest size of the pool's latest run of sizes above it."""
        since = self._sizes[-1][0] if self._sizes else self.clock()
        for at, count in reversed(self._sizes):
            if count <= user:
                break
            since = at
        return since

    def resize(self, count: int) -> None:
        count = max(1, count)
        if count == self.count:
            return
        now = self.clock()
        self.count = count
        if self._sizes:
            self._sizes.append((now, count))
        back = sorted(user for user in self._parked if self.active(user))
        self._parked.difference_update(back)
        self._ready.extend((user, now) for user in back)

    def all_exhausted(self) -> bool:
        return sum(1 for user in self.exhausted if self.active(user)) >= self.count


@dataclass
class ClosedLoopArrivals:
    """Users issue a request, wait for it, think, issue the next one."""

    source: WorkloadSource
    users: UserPool
    events: EventHeap
    limit: int
    stats: ArrivalStats = field(default_factory=ArrivalStats)

    def start(self, now: float) -> None:
        """Issuing begins: every user is ready from the first pass."""
        self.users.begin(now)

    def issue(self, now: float, waiting: int, submit: Submit) -> None:
        """Turn ready users into requests while the backlog has room, each with the instant its user became
        ready: the time it waited for room is in its latencies (the window still counts it from ``now``)."""
        while waiting < self.limit:
            taken = self.users.take()
            if taken is None:
                return
            user, since = taken
            request = self.source.next_request(user)
            if request is None:
                self.users.exhausted.add(user)
                continue
            submit(request, now, since)
            waiting += 1

    def on_event(self, kind: str, payload: Any, now: float) -> bool:
        """Handle a "think" event (a user back from thinking); False when the event is not ours."""
        if kind != "think":
            return False
        self.users.ready(payload, now)
        return True

    def finished(self, request: Request, now: float) -> None:
        """The user's request ended: it thinks, then is ready again, or parked if the pool shrank meanwhile.

        Every user goes through the think event, in the pool or not: one whose request ended while it was
        outside the pool must be parked, or growing the pool again would never bring it back (a search's
        re-measure at 6 users after a step at 5 ran with 5)."""
        self.events.push(now + request.think_s, "think", request.user_id)

    def exhausted(self) -> bool:
        return self.users.all_exhausted()


@dataclass
class OpenLoopArrivals:
    """Arrivals on the source's clock, whether or not earlier requests completed."""

    source: WorkloadSource
    users: UserPool
    limit: int
    started_at: float = math.inf  # set by ``start`` (nothing is due before the first request is issued)
    stats: ArrivalStats = field(default_factory=ArrivalStats)
    counting: Callable[[], bool] = lambda: True  # whether the measured window is open
    #: The arrival rate as a multiple of the source's (an autoscaler's ``arrival_scale``): the source's clock
    #: runs ``scale`` times as fast from ``_anchor`` on, (wall instant, source seconds) at the last change.
    scale: float = 1.0
    _anchor: tuple[float, float] | None = None
    _next: Request | None = None
    _done: bool = False
    _turn: int = 0

    def __post_init__(self) -> None:
        self.stats.open_loop = True

    def start(self, now: float) -> None:
        """Issuing begins: the source's clock starts at ``now`` (built before the run, ``started_at`` waits)."""
        self.started_at = now

    def issue(self, now: float, waiting: int, submit: Submit) -> None:
        for _ in range(MAX_ARRIVALS_PER_PASS):
            request = self._peek()
            if request is None:
                return
            due = self._due(request)
            if due > now:
                return
            self._next = None
            counted = self.counting()
            if waiting >= self.limit:
                self.stats.dropped += counted
            else:
                submit(request, now, None)
                waiting += 1
                self.stats.late += counted and now - due > LATE_S
            if counted:
                self.stats.count_offered(due)
            self.stats.backlog_peak = max(self.stats.backlog_peak, waiting)

    def _peek(self) -> Request | None:
        if self._next is None and not self._done:
            self._next = self.source.next_request(self._turn % max(1, len(self.users)))
            self._turn += 1
            self._done = self._next is None
        return self._next

    def next_due(self) -> float | None:
        request = self._peek()
        return None if request is None else self._due(request)

    def _due(self, request: Request) -> float:
        """The wall instant an arrival is due: the source's time, sped up by ``scale`` since the last change."""
        wall, source = self._anchor or (self.started_at, 0.0)
        return wall + ((request.arrival_s or 0.0) - source) / self.scale

    def set_scale(self, now: float, scale: float) -> None:
        """From ``now`` on, arrivals come ``scale`` times as fast as the source's clock says."""
        wall, source = self._anchor or (self.started_at, 0.0)
        self._anchor = (now, source + (now - wall) * self.scale)
        self.scale = scale

    def on_event(self, kind: str, payload: Any, now: float) -> bool:
        return False

    def finished(self, request: Request, now: float) -> None:
        return None

    def exhausted(self) -> bool:
        return self._done


Arrivals = ClosedLoopArrivals | OpenLoopArrivals  # the run's arrival process, one of the two
