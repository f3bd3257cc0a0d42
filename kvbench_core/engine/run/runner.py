"""One run of a resolved spec: set up tiers and workload, drive users, measure, drain, clean up.

Data flows one way: run plan (``runspec/plan.py``) -> tiers + cache (``setup``) -> workload source -> arrival process
(``arrivals``: closed-loop users or open-loop arrivals, bounded backlog) -> worker pool (``workers``:
``max_inflight`` threads, QoS priority) -> cache -> telemetry -> result.  The measurement window
(``window``) says when measuring starts and stops and how long the drain may last.  The runner never
blocks a thread per user: a user is a counter in the user pool and a timed event while it thinks;
generation time is a timed event, not a sleeping worker.

Every part is assembled before the loop starts (``parts.assemble``), the loop is ``loop.RunLoop``, and the
end is ``parts.dismantle``: the runner holds the run's lifecycle and its stop, which a signal may ask for at
any moment of it, even before set-up.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from kvbench_core.contracts.errors import StorageError, UserError
from kvbench_core.engine.measure.cancel import CancelToken
from kvbench_core.engine.run import setup
from kvbench_core.engine.run.dryrun import tier_fit_warnings
from kvbench_core.engine.run.loop import RunLoop
from kvbench_core.engine.run.parts import Controls, RunParts, assemble, dismantle
from kvbench_core.engine.run.precondition import precondition_bottom_tier
from kvbench_core.engine.run.run_state import RunState
from kvbench_core.engine.run.scheduler import EventHeap
from kvbench_core.engine.run.stopping import Stopping
from kvbench_core.runspec.plan import RunPlan

__all__ = ["RunState", "Runner", "new_run_id"]


class Runner:
    """Executes a run plan once (one trial, one client).  Its attributes are all set here (slots), so
    nothing of the run is born on it while it runs."""

    __slots__ = ("_cancel", "_events", "_stop", "_stopping", "barrier", "on_progress", "parts", "plan", "state")

    def __init__(self, plan: RunPlan, *, run_id: str | None = None, client_index: int = 0,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 barrier: Callable[[], None] | None = None) -> None:
        self.plan = plan
        self.state = RunState(run_id=run_id or new_run_id(), plan=plan, client_index=client_index)
        self.on_progress = on_progress
        self.barrier = barrier
        self._cancel = CancelToken()
        self._stopping = Stopping(self.state, self._cancel)
        self._stop = self._stopping.event
        self._events = EventHeap()
        self.parts: RunParts | None = None  # assembled when the run starts (a failed set-up leaves None)

    # -- control ---------------------------------------------------------------------------------------
    def request_stop(self, reason: str, status: str | None = None, error: UserError | None = None) -> None:
        """Stop issuing requests (signal handler, fatal error, autoscaler convergence, duration); the first
        request names the stop, a signal also cancels the work in flight (``engine/run/stopping.py``)."""
        self._stopping.request(reason, status, error)
        self._events.wake()

    @property
    def stopped(self) -> bool:
        """Whether a stop was requested (signal, error, duration, convergence)."""
        return self._stop.is_set()

    def _storage_error(self, error: StorageError) -> None:
        if self.plan.on_error == "stop":
            self.request_stop(f"storage error: {error}", status="failed", error=error)

    def _crash(self, error: BaseException) -> None:
        self.state.crash = error
        self.request_stop(f"internal error: {type(error).__name__}: {error}", status="failed")

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> RunState:
        state, plan = self.state, self.plan
        state.clock.started = time.perf_counter()
        try:
            self.parts = parts = assemble(state, Controls(self._cancel, self._events, self._storage_error,
                                                          self._crash))
            state.preload = setup.preload(parts.source, parts.cache, state.worker_count, state.bytes_per_token)
            if plan.precondition and not self.stopped:
                state.precondition = precondition_bottom_tier(state.tiers[-1], parts.executor.pool,
                                                              plan.precondition, self._stop)
            if self.barrier is not None:
                self.barrier()
            if not self.stopped:
                RunLoop(state, parts, events=self._events, cancel=self._cancel, stop=self._stop,
                        request_stop=self.request_stop, on_storage_error=self._storage_error,
                        on_progress=self.on_progress).drive()
            if parts.autoscaler is not None:
                state.autoscaler_summary = parts.autoscaler.summary()
        except UserError as error:
            self.request_stop(str(error), status="failed", error=error)
            if state.telemetry.measuring:
                state.telemetry.stop_measuring()
        finally:
            state.clock.cleanup_started = time.perf_counter()
            dismantle(state, self.parts)
            state.clock.cleanup_ended = time.perf_counter()
        if state.status == "running":  # no stop labelled it: its status is the result's (results/status.py)
            state.status = "ended"
        state.warnings += tier_fit_warnings(plan, {tier.name: tier.capacity for tier in state.tiers},
                                            state.smallest_entry_bytes, "this run's requests")
        state.warnings += [note for tier in state.tiers for note in tier.backend.notes()]
        state.plugin_sections.update(setup.leftovers_section(state.tiers))
        return state


def new_run_id() -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{secrets.token_hex(3)}"
