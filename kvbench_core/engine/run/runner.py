"""One run of a resolved spec: set up tiers and workload, drive users, measure, drain, clean up.

Data flows one way: run plan (``runspec/plan.py``) -> tiers + cache (``setup``) -> workload source -> arrival process
(``arrivals``: closed-loop users or open-loop arrivals, bounded backlog) -> worker pool (``workers``:
``max_inflight`` threads, QoS priority) -> cache -> telemetry -> result.  The measurement window
(``window``) says when measuring starts and stops and how long the drain may last.  The runner never
blocks a thread per user: a user is a counter in the user pool and a timed event while it thinks;
generation time is a timed event, not a sleeping worker.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from kvbench_core.contracts.autoscaler import Autoscaler
from kvbench_core.contracts.errors import StorageError, UserError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.plugins import get_plugin_manager
from kvbench_core.contracts.workload import WorkloadSource
from kvbench_core.engine.cache.cache_types import EvictionPolicy
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.cancel import CancelToken, CommandRecorder, abandoned_warning, seal_abandoned
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.engine.measure.window import CANCEL_GRACE_S, MeasurementWindow, default_drain_timeout
from kvbench_core.engine.run import setup
from kvbench_core.engine.run.arrivals import ClosedLoopArrivals, OpenLoopArrivals, UserPool, backlog_limit
from kvbench_core.engine.run.autoscaling import telemetry_sample, trajectory_entry
from kvbench_core.engine.run.dryrun import tier_fit_warnings
from kvbench_core.engine.run.executor import RequestExecutor
from kvbench_core.engine.run.load_requests import LoadRequests
from kvbench_core.engine.run.precondition import precondition_bottom_tier
from kvbench_core.engine.run.run_state import RunState, run_view
from kvbench_core.engine.run.scheduler import EventHeap
from kvbench_core.engine.run.stopping import Stopping
from kvbench_core.engine.run.workers import Finished, WorkerPool
from kvbench_core.runspec.plan import RunPlan

__all__ = ["RunState", "Runner", "new_run_id"]

POLL_S = 0.05  # the scheduler wakes at least this often (stop requests, signals)


class Runner:
    """Executes a run plan once (one trial, one client)."""

    def __init__(self, plan: RunPlan, *, run_id: str | None = None, client_index: int = 0,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 barrier: Callable[[], None] | None = None) -> None:
        self.plan = plan
        self.state = RunState(run_id=run_id or new_run_id(), plan=plan, client_index=client_index)
        self.on_progress = on_progress
        self.barrier = barrier
        self.qos = plan.qos
        self._cancel = CancelToken()
        self._stopping = Stopping(self.state, self._cancel)
        self._stop = self._stopping.event
        self._events = EventHeap()
        self._completed = 0  # requests finished inside the window (the request limit counts these)
        self._log: Any = None
        self._recorders: list[CommandRecorder] = []  # one per tier, sealed if the drain abandons a worker
        self.cache: MultiTierCache | None = None

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

    # -- set-up ------------------------------------------------------------------------------------------
    def _recorder(self, tier: str) -> CommandRecorder:
        path = self.plan.output.io_log
        if path and self._log is None:
            from kvbench_core.engine.measure.iolog import IOLog

            self._log = IOLog(path)  # closed (flushed) in _cleanup, before the next trial reopens the path
        assert self.state.telemetry is not None
        self._recorders.append(CommandRecorder(tier, self.state.telemetry, io_log=self._log, token=self._cancel))
        return self._recorders[-1]

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> RunState:
        state, plan = self.state, self.plan
        state.clock.started = time.perf_counter()
        state.model = plan.model
        # Every TP rank stores its own object, so the storage sees all ranks' bytes per token.
        state.bytes_per_token = plan.model.bytes_per_token_all_ranks
        users = plan.users_for_client(state.client_index)
        autoscaler = setup.build_autoscaler(plan, users)
        state.worker_count = workers = plan.workers(users)
        state.telemetry = Telemetry(list(self.qos))
        try:
            # The workload first: a malformed trace is reported before any tier is opened or written.
            state.source = source = setup.build_source(plan, users)
            executor = self._build_cache(workers)
            state.preload = setup.preload(source, executor.cache, workers, state.bytes_per_token)
            if plan.precondition and not self.stopped:
                state.precondition = precondition_bottom_tier(state.tiers[-1], executor.pool, plan.precondition,
                                                              self._stop)
            if self.barrier is not None:
                self.barrier()
            if not self.stopped:
                self._drive(source, executor, autoscaler, users, workers)
            if autoscaler is not None:
                state.autoscaler_summary = autoscaler.summary()
        except UserError as error:
            self.request_stop(str(error), status="failed", error=error)
            if state.telemetry.measuring:
                state.telemetry.stop_measuring()
        finally:
            state.clock.cleanup_started = time.perf_counter()
            self._cleanup()
            state.clock.cleanup_ended = time.perf_counter()
        if state.status == "running":  # no stop labelled it: its status is the result's (results/status.py)
            state.status = "ended"
        state.warnings += tier_fit_warnings(plan, {tier.name: tier.capacity for tier in state.tiers},
                                            state.smallest_entry_bytes, "this run's requests")
        state.warnings += [note for tier in state.tiers for note in tier.backend.notes()]
        state.plugin_sections.update(setup.leftovers_section(state.tiers))
        return state

    def _build_cache(self, workers: int) -> RequestExecutor:
        plan, state = self.plan, self.state
        setup.build_tiers(plan, state.tiers, run_id=state.run_id, client_index=state.client_index, workers=workers,
                          io_log_for=self._recorder)
        policy = EvictionPolicy(**plan.eviction)
        setup.check_an_entry_fits(state.tiers, state.bytes_per_token, policy.large_entry_limit_ratio)
        max_piece = max(int(t.backend.transfer_size) for t in state.tiers)
        pool = NoisePool(plan.seed, pool_bytes=32 << 20, max_piece=max(max_piece, 1 << 20),
                         kind=plan.payload)  # the declared payload kind (docs/codecs.md)
        assert state.telemetry is not None
        self.cache = MultiTierCache(state.tiers, state.telemetry, pool.payload, policy=policy,
                                    promotion=plan.promotion, cancel=self._cancel)
        return RequestExecutor(self.cache, state.telemetry, state.bytes_per_token, plan.workload.decode_batch,
                               pool=pool, verify=plan.verify)

    def _drive(self, source: WorkloadSource, executor: RequestExecutor, autoscaler: Autoscaler | None,
               users: int, workers: int) -> None:
        """The scheduler loop: open the window, issue work, book completions, tick, until a stop."""
        planned = self.plan.window
        duration, drain = planned.duration_s, planned.drain_timeout_s
        self.state.clock.issuing = started_at = time.perf_counter()
        self.window = window = MeasurementWindow(
            started_at=started_at, warmup_s=planned.warmup_s, duration_s=duration,
            request_limit=planned.request_limit,
            drain_timeout_s=default_drain_timeout(duration) if drain is None else float(drain))
        self.pool = pool = WorkerPool(
            workers, executor, self._events, generation_s_per_token=self.plan.workload.generation_s_per_token,
            on_storage_error=self._storage_error, on_crash=self._crash,
            priority={name: cls.priority for name, cls in self.qos.items()})
        self.users = UserPool(users)
        limit = backlog_limit(workers)
        self.arrivals = arrivals = (
            OpenLoopArrivals(source, self.users, window.started_at, limit, counting=lambda: window.is_open)
            if source.open_loop else ClosedLoopArrivals(source, self.users, self._events, limit))
        self.autoscaler = autoscaler
        self._interval = self.plan.output.interval_s
        self._next_tick = window.started_at + self._interval
        self._next_scale: float | None = None
        self._load: LoadRequests | None = None  # the requests an autoscaler decision judges
        pool.start()
        try:  # whatever ends the loop (an exception too), the window closes and the workers stop
            while True:
                now = time.perf_counter()
                if window.due_to_open(now):
                    if not self._open_window():
                        break
                    now = time.perf_counter()  # the window opened after ``now``: work issued from here is inside
                reason = window.stop_reason(now, self._completed)
                if reason:
                    self.request_stop(reason)
                if self.stopped:
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
        wake = [POLL_S, self._next_tick - now]
        # An open-loop arrival due wakes the scheduler, unless the backlog is full: then the due ones are
        # dropped at the next poll, and a trace replayed at infinite speed cannot spin the scheduler.
        if isinstance(self.arrivals, OpenLoopArrivals) and self.pool.waiting < self.arrivals.limit:
            due = self.arrivals.next_due()
            if due is not None:
                wake.append(due - now)
        return max(0.0, min(wake))

    def _open_window(self) -> bool:
        """Open the measured window (after warm-up); False when a hook refused to let it open."""
        state = self.state
        try:  # a hook may block (a tracer attaching): the window opens when it returns
            get_plugin_manager().hook.kvbench_measurement_started(run=run_view(state))
        except UserError as error:
            self.request_stop(str(error), status="failed", error=error)
            return False
        assert state.telemetry is not None
        assert self.cache is not None
        state.cache_state = self.cache.cache_state()
        state.telemetry.start_measuring()
        now = state.telemetry.window_start
        self.window.open(now)
        self._next_tick = now + self._interval  # intervals of the measured window start with it
        state.measure_start, state.measure_start_wall = now, time.time()
        self._next_scale = now + self.autoscaler.interval_s if self.autoscaler else None
        self._load = LoadRequests(now) if self.autoscaler else None
        return True

    def _submit(self, request: Any, now: float) -> None:
        if self.window.is_open:
            self.state.requests_issued += 1
            self.arrivals.stats.count_issued(request.qos)
        if self._load is not None:
            self._load.issued(now)
        self.pool.submit(request, now)

    def _storage_error(self, error: StorageError) -> None:
        if self.plan.on_error == "stop":
            self.request_stop(f"storage error: {error}", status="failed", error=error)

    def _crash(self, error: BaseException) -> None:
        self.state.crash = error
        self.request_stop(f"internal error: {type(error).__name__}: {error}", status="failed")

    def _on_event(self, kind: str, payload: Any, now: float) -> None:
        if kind == "finished":
            self._finish(payload)
            self.arrivals.finished(payload.request, now)
        else:
            self.arrivals.on_event(kind, payload, now)

    def _finish(self, done: Finished) -> None:
        """Book a request that ended, in the window it belongs to (see ``Telemetry.bucket``)."""
        telemetry = self.state.telemetry
        assert telemetry is not None
        if self._load is not None:
            self._load.finished(done)
        if done.kind == "cancelled":
            telemetry.record_request_cancelled(done.enqueued)
            return
        if done.request.write is not None and done.request.write.tokens:  # a tier no entry fits: Runner.run
            size = done.request.write.tokens * self.state.bytes_per_token
            self.state.smallest_entry_bytes = min(size, self.state.smallest_entry_bytes or size)
        where = telemetry.bucket(done.enqueued, done.finished)
        if where == "window" and self.window.request_limit is not None and self._completed >= self.window.request_limit:
            where = "drain"  # finished in the same pass as the one that hit the limit: past it
        if done.outcome is not None:
            telemetry.book(done.outcome.tally, where)
        if where == "window":
            self._completed += 1  # a failed request is finished too, so a failing tier cannot run forever
        request = done.request
        if done.kind == "failed":
            telemetry.record_request_failed(where=where)
        elif done.kind == "write_failed":
            telemetry.record_request_write_failed(where=where)
        else:
            assert done.outcome is not None
            telemetry.record_request(request.qos, done.finished - done.enqueued, done.served - done.enqueued,
                                     done.started - done.enqueued, done.outcome.storage_s, request.context_tokens,
                                     request.generate_tokens, done.outcome.decode_tokens_read, where=where)
            if where == "window":
                if self._load is not None:
                    self._load.add(done)
                samples = self.state.workload_samples
                samples["context"].append(request.context_tokens)
                samples["generate"].append(request.generate_tokens)
                samples["prefix"].extend(read.tokens for read in request.reads if read.kind == "prefix")

    def _tick(self, now: float) -> None:
        """Close a time-series interval, demote cold entries, report progress, let the autoscaler act."""
        assert self.cache is not None and self.state.telemetry is not None
        if now >= self._next_tick:
            self._next_tick = now + self._interval
            point = self._close_interval()
            if any(t.cold_after is not None for t in self.cache.tiers):
                try:  # the cold mover's storage errors count like a request's (on_error)
                    self.cache.demote_cold(budget_s=self.window.time_left(now, until=self._next_tick))
                except StorageError as error:
                    self._storage_error(error)
            if self.on_progress:
                self.on_progress(self._progress(point, now))
        if self.autoscaler is not None and self.window.is_open and self._next_scale is not None \
                and now >= self._next_scale:
            self._next_scale = now + self.autoscaler.interval_s
            self._scale(now)

    def _close_interval(self, end: float | None = None) -> dict[str, Any]:
        assert self.cache is not None and self.state.telemetry is not None
        return self.state.telemetry.close_interval(len(self.users), {"occupancy": self.cache.occupancy(),
                                                                     "queue": self.pool.waiting}, end=end)

    def _scale(self, now: float) -> None:
        """One autoscaler decision, recorded in the trajectory; the user pool follows it."""
        assert self.autoscaler is not None and self.state.telemetry is not None
        sample = telemetry_sample(self.state.telemetry.series, t_s=self.window.elapsed(now),
                                  interval_s=self.autoscaler.interval_s, users=len(self.users), qos=self.qos,
                                  load=self._load, open_loop=isinstance(self.arrivals, OpenLoopArrivals))
        decision = self.autoscaler.decide(sample)
        self.state.autoscaling.append(trajectory_entry(self.window.elapsed(now), len(self.users), sample, decision))
        open_loop = self.arrivals if isinstance(self.arrivals, OpenLoopArrivals) else None
        scale = decision.arrival_scale if open_loop is not None else None  # a closed loop's load is its users
        rescaled = open_loop is not None and scale is not None and scale != open_loop.scale
        if self._load is not None and (rescaled or max(1, decision.users) != len(self.users)):
            self._load.load_changed(now)
        if open_loop is not None and scale is not None:
            open_loop.set_scale(now, scale)
        self.users.resize(decision.users)
        if decision.converged and self.plan.autoscaler is not None and self.plan.autoscaler.stop_when_converged:
            self.request_stop(f"autoscaler converged: {decision.reason}")

    def _progress(self, point: dict[str, Any], now: float) -> dict[str, Any]:
        window = self.window
        return {"phase": "measure" if window.is_open else "warmup", "elapsed_s": window.elapsed(now),
                "duration_s": window.duration_s, "warmup_s": window.warmup_s, **point}

    def _drain(self) -> None:
        """Stop issuing; let in-flight work finish within the drain limit, then cancel it; close the window."""
        state, window, pool = self.state, self.window, self.pool
        telemetry = state.telemetry
        assert telemetry is not None and self.cache is not None
        now = time.perf_counter()
        if window.is_open:
            telemetry.close_window()
            now = telemetry.window_close or now
            state.measure_end, state.measure_end_wall = now, time.time()
            if self.on_progress:  # the drain has no intervals of its own: say that it started
                self.on_progress({"phase": "drain"})
        window.close(now)
        pool.drop_waiting()  # never started: unfinished (issued - finished, in the result)
        pool.close()
        deadline = window.drain_deadline()
        while pool.inflight > 0 and not self._cancel.cancelled and time.perf_counter() < deadline:
            self._book_due()
            self._events.wait(time.perf_counter(), POLL_S)
        cancelled = pool.inflight > 0
        if cancelled:
            self._cancel.cancel()
        abandoned = not pool.join(CANCEL_GRACE_S)
        state.clock.drain_ended = time.perf_counter()
        self._book_due()
        state.occupancy_at_end = self.cache.occupancy()  # the seed's tier distribution, before cleanup
        state.users_final = len(self.users)
        if window.opened_at is None:
            state.stop_reason = state.stop_reason or "stopped during warm-up"
            return
        # The last, partial interval ends with the window; closed only now, once every request that
        # finished inside the window has been booked (some are booked during the drain).
        self._close_interval(end=telemetry.window_close)
        telemetry.stop_measuring()
        state.clock.drain_ended = telemetry.window_end  # the clock reading metrics.drain.seconds ends at
        unbooked = seal_abandoned(telemetry, self._recorders) if abandoned else None
        state.drain = {**telemetry.drain.to_dict(), "limit_s": window.drain_timeout_s,
                       "cancelled_in_flight": cancelled, "workers_abandoned": abandoned}
        if unbooked is not None:
            state.drain["abandoned_bytes"] = unbooked
            state.warnings.append(abandoned_warning(unbooked, CANCEL_GRACE_S))
        state.arrivals = self.arrivals.stats.as_dict(now - window.opened_at, telemetry.requests)
        failed = telemetry.requests_failed + telemetry.requests_write_failed
        state.unfinished_requests = max(0, state.requests_issued - telemetry.requests - failed)
        for section in get_plugin_manager().hook.kvbench_measurement_finished(run=run_view(state)):
            if section:
                state.plugin_sections.update(section)

    def _book_due(self) -> None:
        for kind, payload in self._events.pop_due(time.perf_counter()):
            if kind == "finished":
                self._finish(payload)

    def _cleanup(self) -> None:
        """Remove every entry this run wrote (unless keep_files) and close the tiers."""
        if self.cache is not None and not self.plan.output.keep_files:
            try:
                for tier in self.state.tiers:
                    tier.backend.cleanup_begins()
                self.cache.clear()
            except Exception as error:  # a kvbench bug: the tiers still close, the result is still written
                self.state.crash = self.state.crash or error
                self.state.plugin_sections.setdefault("cleanup_errors", []).append(f"cache: {error!r}")
        for tier in self.state.tiers:
            try:
                tier.backend.close()
            except Exception as error:  # cleanup must not hide the run's own outcome
                self.state.plugin_sections.setdefault("cleanup_errors", []).append(f"{tier.name}: {error}")
        if self._log is not None:
            self._log.close()


def new_run_id() -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{secrets.token_hex(3)}"
