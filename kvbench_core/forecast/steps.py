"""A request's cache work, step by step on the simulated clock: the executor runs as a greenlet.

The engine's ``RequestExecutor`` and ``MultiTierCache`` are synchronous: an operation returns when its
bytes have moved.  In a forecast each request runs them in a greenlet of its own; a ``ModelTier``
operation switches back to the simulation (``charge``), which holds the tier for the operation's service
time and then resumes the request, so the cache's state changes at the simulated instant each operation
ends, as in a run: a decode read that comes a second after the prefill finds what other users' writes
left in DRAM by then.  (Running a request's bookkeeping all at once when it starts sent its later reads
to entries not yet evicted: the nvme tier's read bandwidth came out 35-60 % low.)

All greenlets share one thread, so two things a thread would have are given per request here: an entry
lock another suspended request holds makes the waiter yield to the simulation until it is released
(``SimLock``), and the telemetry's per-thread request tally is re-opened each time a request resumes
(``Stepper.resume``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Generator
from typing import Any

from kvbench_core.contracts.errors import MissingDependency


def greenlet_module() -> Any:
    try:
        return importlib.import_module("greenlet")
    except ImportError as error:
        raise MissingDependency("kvbench forecast needs greenlet: pip install 'kvbench[forecast]'") from error


def charge(tier: str, op: str, nbytes: int) -> None:
    """Called by a model tier for each operation: inside a simulated request, hand it to the simulation and
    wait until its time has passed; outside one (the preload, not measured in a run either), nothing."""
    current = greenlet_module().getcurrent()
    if current.parent is not None:
        current.parent.switch(("op", tier, op, nbytes))


def pause(seconds: float) -> None:
    """The cache's wait for a busy LRU entry: inside a simulated request, simulated time passes while the
    other requests go on (on the wall clock nothing would, as they wait for this one)."""
    current = greenlet_module().getcurrent()
    if current.parent is not None:
        current.parent.switch(("sleep", seconds))


class SimLock:
    """An entry's lock for requests that are greenlets: a blocking acquire of a held lock waits in simulated
    time (a simpy event the release triggers); a non-blocking or timed one fails at once, as nothing can
    release it while this request runs."""

    __slots__ = ("env", "held", "waiters")

    def __init__(self, env: Any) -> None:
        self.env = env
        self.held = False
        self.waiters: list[Any] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        while self.held:
            current = greenlet_module().getcurrent()
            if not blocking or timeout >= 0 or current.parent is None:
                return False
            released = self.env.event()
            self.waiters.append(released)
            current.parent.switch(("wait", released))
        self.held = True
        return True

    def release(self) -> None:
        self.held = False
        if self.waiters:
            self.waiters.pop(0).succeed()

    def locked(self) -> bool:
        return self.held

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class Stepper:
    """One request's executor call as a greenlet, driven from a simpy process."""

    def __init__(self, run: Callable[[], Any], telemetry: Any) -> None:
        self.greenlet = greenlet_module().greenlet(run)
        self.telemetry = telemetry
        self.tallies: list[Any] = []  # the request's records, one tally per stretch it ran

    def resume(self) -> Any:
        """Run the request until its next operation, lock wait or end; what it yielded, or its result."""
        self.tallies.append(self.telemetry.begin_request())
        message = self.greenlet.switch()
        self.telemetry.end_request()
        return message

    def steps(self) -> Generator[tuple[str, Any], None, Any]:
        """The request's operations and waits in order; returns the executor's outcome."""
        message = self.resume()
        while not self.greenlet.dead:
            yield message
            message = self.resume()
        return message

    def outcomes(self, outcome: Any) -> list[str | None]:
        """Every read's outcome (a tier, or None for a miss) over the stretches it ran."""
        tallies = [outcome.tally, *self.tallies] if outcome.tally is not None else self.tallies
        return [tier for tally in {id(t): t for t in tallies}.values() for tier in tally.outcomes]
