"""The scheduler loop of one run: from the first request issued to the end of the drain.

It works on the run's parts, assembled before it starts (``parts.RunParts``), and its own state is the four
fields of ``RunLoop`` set in its constructor (slots), so nothing is born while it runs: requests finished in
the window (the request limit counts these), when the current interval closes, when the autoscaler decides
next, and the requests that decision judges.  A request that ends is booked by ``finishing.book_finished``;
the drain, the window's close and the give-up on workers stuck past the cancel grace are ``_drain``'s.

Nothing the loop does may hold it: storage work is the workers' and the cold mover's (``cold_mover``), which
the loop only wakes, and a window stopped by its duration ends at its planned end (open + duration), booked
by time from there on as the drain's (``Telemetry.start_measuring``), however late the loop turns to close it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kvbench_core.contracts.errors import StorageError, UserError
from kvbench_core.contracts.plugins import get_plugin_manager
from kvbench_core.contracts.workload import Request
from kvbench_core.engine.measure.cancel import CancelToken, abandoned_warning, seal_abandoned
from kvbench_core.engine.measure.window import CANCEL_GRACE_S
from kvbench_core.engine.run.arrivals import OpenLoopArrivals
from kvbench_core.engine.run.autoscaling import telemetry_sample, trajectory_entry
from kvbench_core.engine.run.finishing import book_finished
from kvbench_core.engine.run.load_requests import LoadRequests
from kvbench_core.engine.run.parts import RunParts
from kvbench_core.engine.run.run_state import RunState, run_view
from kvbench_core.engine.run.scheduler import EventHeap

POLL_S = 0.05  # the scheduler wakes at least this often (stop requests, signals)


class RunLoop:
    """Issues work, books completions and ticks until a stop; then drains (``drive``)."""

    __slots__ = ("_cancel", "_events", "_stop", "completed", "load", "next_scale", "next_tick", "on_progress",
                 "on_storage_error", "parts", "plan", "request_stop", "state")

    def __init__(self, state: RunState, parts: RunParts, *, events: EventHeap, cancel: CancelToken,
                 stop: threading.Event, request_stop: Callable[..., None],
                 on_storage_error: Callable[[StorageError], None],
                 on_progress: Callable[[dict[str, Any]], None] | None) -> None:
        self.state, self.plan, self.parts = state, state.plan, parts
        self._events, self._cancel, self._stop = events, cancel, stop
        self.request_stop, self.on_storage_error, self.on_progress = request_stop, on_storage_error, on_progress
        self.completed = 0  # requests finished inside the window (the request limit counts these)
        self.next_tick = 0.0  # when the current time-series interval closes
        self.next_scale: float | None = None  # the autoscaler's next decision, once the window is open
        self.load: LoadRequests | None = None  # the requests an autoscaler decision judges, from the open

    def drive(self) -> None:
        """The scheduler loop: open the window, issue work, book completions, tick, until a stop."""
        parts = self.parts
        window, pool, arrivals = parts.window, parts.pool, parts.arrivals
        self.state.clock.issuing = started_at = time.perf_counter()
        self.next_tick = started_at + self.plan.output.interval_s
        parts.start(started_at)
        try:  # whatever ends the loop (an exception too), the window closes and the workers stop
            while True:
                now = time.perf_counter()
                if window.due_to_open(now):
                    if not self._open_window():
                        break
                    now = time.perf_counter()  # the window opened after ``now``: work issued from here is inside
                reason = window.stop_reason(now, self.completed)
                if reason:
                    self.request_stop(reason)
                if self._stop.is_set():
                    break
                for kind, payload in self._events.pop_due(now):
                    self._on_event(kind, payload, now)
                arrivals.issue(now, pool.waiting, self._submit)
                self._tick(now)
                if arrivals.exhausted() and pool.inflight == 0 and self._events.pending("finished") == 0:
                    self.request_stop("workload exhausted")
                    continue
                self._events.wait(now, self._wait_limit(now))
        except BaseException:
            self._cancel.cancel()  # the run is ending on an error: no drain to wait for
            raise
        finally:
            self._drain()

    def _wait_limit(self, now: float) -> float:
        wake = [POLL_S, self.next_tick - now]
        # An open-loop arrival due wakes the scheduler, unless the backlog is full: then the due ones are
        # dropped at the next poll, and a trace replayed at infinite speed cannot spin the scheduler.
        arrivals = self.parts.arrivals
        if isinstance(arrivals, OpenLoopArrivals) and self.parts.pool.waiting < arrivals.limit:
            due = arrivals.next_due()
            if due is not None:
                wake.append(due - now)
        return max(0.0, min(wake))

    def _open_window(self) -> bool:
        """Open the measured window (after warm-up); False when a hook refused to let it open."""
        state, autoscaler = self.state, self.parts.autoscaler
        try:  # a hook may block (a tracer attaching): the window opens when it returns
            get_plugin_manager().hook.kvbench_measurement_started(run=run_view(state))
        except UserError as error:
            self.request_stop(str(error), status="failed", error=error)
            return False
        state.cache_state = self.parts.cache.cache_state()
        state.telemetry.start_measuring(self.parts.window.duration_s)
        now = state.telemetry.window_start
        self.parts.window.open(now)
        self.next_tick = now + self.plan.output.interval_s  # intervals of the measured window start with it
        state.measure_start, state.measure_start_wall = now, time.time()
        self.next_scale = now + autoscaler.interval_s if autoscaler else None
        self.load = LoadRequests(now) if autoscaler else None
        return True

    def _submit(self, request: Request, now: float, ready: float | None) -> None:
        if self.parts.window.is_open:
            self.state.requests_issued += 1
            self.parts.arrivals.stats.count_issued(request.qos)
        if self.load is not None:
            self.load.issued(now)
        self.parts.pool.submit(request, now, ready)

    def _on_event(self, kind: str, payload: Any, now: float) -> None:
        if kind == "finished":
            self._finish(payload)
            self.parts.arrivals.finished(payload.request, now)
        else:
            self.parts.arrivals.on_event(kind, payload, now)

    def _finish(self, done: Any) -> None:
        """Book a request that ended (``finishing.book_finished``); one of the window's counts towards the
        request limit, and a request finished in the pass that reached the limit is past it (the drain's)."""
        limit = self.parts.window.request_limit
        if book_finished(self.state, done, self.load, past_limit=limit is not None and self.completed >= limit):
            self.completed += 1  # a failed request is finished too, so a failing tier cannot run forever

    def _tick(self, now: float) -> None:
        """Close a time-series interval, wake the cold mover, report progress, let the autoscaler act."""
        window, mover = self.parts.window, self.parts.mover
        if now >= self.next_tick:
            self.next_tick = now + self.plan.output.interval_s
            point = self._close_interval()
            if mover is not None:
                mover.wake()
            if self.on_progress:
                self.on_progress({"phase": "measure" if window.is_open else "warmup", "elapsed_s": window.elapsed(now),
                                  "duration_s": window.duration_s, "warmup_s": window.warmup_s, **point})
        if self.parts.autoscaler is not None and window.is_open and self.next_scale is not None \
                and now >= self.next_scale:
            self.next_scale = now + self.parts.autoscaler.interval_s
            self._scale(now)

    def _close_interval(self, end: float | None = None) -> dict[str, Any]:
        return self.state.telemetry.close_interval(len(self.parts.users), {"occupancy": self.parts.cache.occupancy(),
                                                                           "queue": self.parts.pool.waiting}, end=end)

    def _scale(self, now: float) -> None:
        """One autoscaler decision, recorded in the trajectory; the user pool follows it."""
        parts = self.parts
        autoscaler, users, window = parts.autoscaler, parts.users, parts.window
        assert autoscaler is not None
        open_loop = parts.arrivals if isinstance(parts.arrivals, OpenLoopArrivals) else None
        sample = telemetry_sample(self.state.telemetry.series, t_s=window.elapsed(now),
                                  interval_s=autoscaler.interval_s, users=len(users), qos=self.plan.qos,
                                  load=self.load, open_loop=open_loop is not None)
        decision = autoscaler.decide(sample)
        self.state.autoscaling.append(trajectory_entry(window.elapsed(now), len(users), sample, decision))
        scale = decision.arrival_scale if open_loop is not None else None  # a closed loop's load is its users
        rescaled = open_loop is not None and scale is not None and scale != open_loop.scale
        if self.load is not None and (rescaled or max(1, decision.users) != len(users)):
            self.load.load_changed(now)
        if open_loop is not None and scale is not None:
            open_loop.set_scale(now, scale)
        users.resize(decision.users)
        if decision.converged and self.plan.autoscaler is not None and self.plan.autoscaler.stop_when_converged:
            self.request_stop(f"autoscaler converged: {decision.reason}")

    def _drain(self) -> None:
        """Stop issuing and demoting; let in-flight work (the cold mover's too) finish within the drain limit,
        then cancel it; close the window, at its planned end when the loop turned late to it."""
        state, window, pool, telemetry = self.state, self.parts.window, self.parts.pool, self.state.telemetry
        if self.parts.mover is not None:
            self.parts.mover.stop()  # no demotion starts after the window; the one in flight is the drain's
        now = time.perf_counter()
        if window.is_open:
            telemetry.close_window()
            now = telemetry.window_close or now
            state.measure_end, state.measure_end_wall = now, time.time() - (time.perf_counter() - now)
            if self.on_progress:  # the drain has no intervals of its own: say that it started
                self.on_progress({"phase": "drain"})
        window.close(now)
        pool.drop_waiting()  # never started: unfinished (issued - finished, in the result)
        pool.close()
        deadline = window.drain_deadline()
        while self._busy() and not self._cancel.cancelled and time.perf_counter() < deadline:
            self._book_due()
            self._events.wait(time.perf_counter(), POLL_S)
        cancelled = self._busy()
        if cancelled:
            self._cancel.cancel()
        abandoned = not self._join(CANCEL_GRACE_S)
        state.clock.drain_ended = time.perf_counter()
        self._book_due()
        state.occupancy_at_end = self.parts.cache.occupancy()  # the seed's tier distribution, before cleanup
        state.users_final = len(self.parts.users)
        if window.opened_at is not None:
            # The last, partial interval ends with the window; closed only now, once every request that
            # finished inside the window has been booked (some are booked during the drain).
            self._close_interval(end=telemetry.window_close)
            telemetry.stop_measuring()
            state.clock.drain_ended = telemetry.window_end  # the clock reading metrics.drain.seconds ends at
        unbooked = seal_abandoned(telemetry, list(self.parts.recorders)) if abandoned else None
        if window.opened_at is None:
            state.stop_reason = state.stop_reason or "stopped during warm-up"
            return
        self._report_drain(now, cancelled, abandoned, unbooked)

    def _busy(self) -> bool:
        """Work is in flight: a request, or the cold mover's last demotion."""
        mover = self.parts.mover
        return self.parts.pool.inflight > 0 or (mover is not None and mover.running)

    def _join(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` in all for the workers and the cold mover to end; True when all did."""
        deadline = time.perf_counter() + timeout_s
        workers = self.parts.pool.join(timeout_s)
        mover = self.parts.mover
        return (mover is None or mover.join(max(0.0, deadline - time.perf_counter()))) and workers

    def _report_drain(self, now: float, cancelled: bool, abandoned: bool,
                      unbooked: dict[str, dict[str, int]] | None) -> None:
        """The drain's section, the arrivals' and the unfinished count, from the figures as they now stand
        (sealed if a worker was abandoned); then the plugins' sections."""
        state, window, telemetry = self.state, self.parts.window, self.state.telemetry
        assert window.opened_at is not None
        state.drain = {**telemetry.drain.to_dict(), "limit_s": window.drain_timeout_s,
                       "cancelled_in_flight": cancelled, "workers_abandoned": abandoned}
        if unbooked is not None:
            state.drain["abandoned_bytes"] = unbooked
            state.warnings.append(abandoned_warning(unbooked, CANCEL_GRACE_S))
        state.arrivals = self.parts.arrivals.stats.as_dict(now - window.opened_at, telemetry.requests)
        failed = telemetry.requests_failed + telemetry.requests_write_failed
        state.unfinished_requests = max(0, state.requests_issued - telemetry.requests - failed)
        for section in get_plugin_manager().hook.kvbench_measurement_finished(run=run_view(state)):
            if section:
                state.plugin_sections.update(section)

    def _book_due(self) -> None:
        for kind, payload in self._events.pop_due(time.perf_counter()):
            if kind == "finished":
                self._finish(payload)
