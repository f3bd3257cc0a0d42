"""Scheduling primitives: a QoS priority queue for ready requests and a timed event heap.

Users are not threads: a user is an id with a next-ready time in the event
heap, so thousands of users cost a few bytes each.  Workers (as many as
``max_inflight``) take ready requests highest-QoS-first, oldest first.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Any


class PriorityRequestQueue:
    """Blocking priority queue: higher priority first, then FIFO by enqueue time."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Any]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, item: Any, priority: int, enqueued_at: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (-priority, enqueued_at, next(self._seq), item))
            self._cond.notify()

    def get(self) -> Any | None:
        """Next item, or None once the queue is closed and empty."""
        with self._cond:
            while not self._heap and not self._closed:
                self._cond.wait()
            if not self._heap:
                return None
            return heapq.heappop(self._heap)[3]

    def drain(self) -> list[Any]:
        """Remove and return everything still waiting (requests never started)."""
        with self._cond:
            items = [entry[3] for entry in self._heap]
            self._heap.clear()
            return items

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)


class EventHeap:
    """Timed events for the scheduler thread; ``wait_until_due`` sleeps until the next one or a wake."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str, Any]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()

    def push(self, due: float, kind: str, payload: Any = None) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), kind, payload))
            self._cond.notify()

    def pop_due(self, now: float) -> list[tuple[str, Any]]:
        with self._cond:
            due = []
            while self._heap and self._heap[0][0] <= now:
                _, _, kind, payload = heapq.heappop(self._heap)
                due.append((kind, payload))
            return due

    def wait(self, now: float, limit: float) -> None:
        """Sleep until the next event is due, ``limit`` passes, or something is pushed."""
        with self._cond:
            timeout = limit
            if self._heap:
                timeout = min(timeout, max(0.0, self._heap[0][0] - now))
            if timeout > 0:
                self._cond.wait(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def pending(self, kind: str) -> int:
        with self._cond:
            return sum(1 for event in self._heap if event[2] == kind)
