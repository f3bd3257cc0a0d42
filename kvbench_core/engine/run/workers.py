"""The worker pool: ``max_inflight`` threads take ready requests highest-QoS-first and run their storage work.

A worker never sleeps through generation time: when a request's storage work is done it pushes a timed
completion event (storage done + simulated generation) to the scheduler's heap and takes the next
request.  So ``max_inflight`` bounds storage concurrency, not users.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kvbench_core.contracts.errors import Cancelled, StorageError
from kvbench_core.contracts.workload import Request
from kvbench_core.engine.run.executor import RequestExecutor, StepOutcome
from kvbench_core.engine.run.scheduler import EventHeap, PriorityRequestQueue


@dataclass(slots=True)
class Finished:
    """One request whose storage work ended, as the scheduler books it at ``finished``."""

    request: Request
    kind: str  # complete | failed | write_failed | cancelled
    enqueued: float
    started: float
    served: float  # storage work done: the service latency ends here
    finished: float  # ... and the response after the simulated generation: end-to-end ends here
    outcome: StepOutcome | None = None
    #: When the request's user was ready, where that was before ``enqueued``: a closed-loop user held back by
    #: a full backlog (``engine.run.arrivals``).  The window and the load steps go by ``enqueued``.
    ready: float | None = None

    @property
    def began(self) -> float:
        """Where the request's latencies start: its user's wait for room in the backlog is queue wait too."""
        return self.enqueued if self.ready is None else min(self.ready, self.enqueued)


class WorkerPool:
    """Threads running requests from a QoS priority queue; completions go to ``events`` as ``finished``."""

    def __init__(self, size: int, executor: RequestExecutor, events: EventHeap, *, generation_s_per_token: float,
                 on_storage_error: Callable[[StorageError], None], on_crash: Callable[[BaseException], None],
                 priority: dict[str, int]) -> None:
        self.size = size
        self.executor = executor
        self.events = events
        self.queue = PriorityRequestQueue()
        self.generation_s_per_token = generation_s_per_token
        self.on_storage_error = on_storage_error
        self.on_crash = on_crash
        self.priority = priority
        self._lock = threading.Lock()
        self._inflight = 0  # enqueued and not yet finished (queued or running)
        self._threads = [threading.Thread(target=self._work, name=f"kvbench-worker-{i}", daemon=True)
                         for i in range(size)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, request: Request, now: float, ready: float | None = None) -> None:
        """Queue ``request`` at ``now``; ``ready``: when its user was ready, if earlier (``Finished.ready``)."""
        with self._lock:
            self._inflight += 1
        self.queue.put((request, now, ready), self.priority.get(request.qos, 1), now)

    @property
    def inflight(self) -> int:
        with self._lock:
            return self._inflight

    @property
    def waiting(self) -> int:
        """Requests queued and not yet taken by a worker (the open-loop backlog's lower bound)."""
        return len(self.queue)

    def drop_waiting(self) -> int:
        """Remove the requests no worker has started (at the end of the window); returns how many."""
        dropped = len(self.queue.drain())
        with self._lock:
            self._inflight -= dropped
        return dropped

    def close(self) -> None:
        """No more requests: workers exit once the queue is empty."""
        self.queue.close()

    def join(self, timeout_s: float) -> bool:
        """Wait for every worker to exit, at most ``timeout_s``; True when they all did."""
        deadline = time.perf_counter() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.perf_counter()))
        return not any(thread.is_alive() for thread in self._threads)

    def _work(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            request, enqueued, ready = item
            due, kind, done = self._run(request, enqueued)
            done.ready = ready
            self.events.push(due, kind, done)
            # Decrement only after the completion event exists, so "nothing in flight" is never seen early.
            with self._lock:
                self._inflight -= 1

    def _run(self, request: Request, enqueued: float) -> tuple[float, str, Finished]:
        started = time.perf_counter()
        try:
            outcome = self.executor.execute(request, book=False, issued_at=enqueued)
        except Cancelled:
            now = time.perf_counter()
            return now, "finished", Finished(request, "cancelled", enqueued, started, now, now)
        except StorageError as error:
            now = time.perf_counter()
            self.on_storage_error(error)
            return now, "finished", Finished(request, "failed", enqueued, started, now, now)
        except Exception as error:  # a kvbench bug: stop, keep the partial result, re-raise later
            now = time.perf_counter()
            self.on_crash(error)
            return now, "finished", Finished(request, "failed", enqueued, started, now, now)
        served = time.perf_counter()
        if outcome.write_failed:
            return served, "finished", Finished(request, "write_failed", enqueued, started, served, served, outcome)
        finished = served + request.generate_tokens * self.generation_s_per_token
        return finished, "finished", Finished(request, "complete", enqueued, started, served, finished, outcome)
