"""The run's parts, assembled once before its loop, so that nothing of a run is born while it runs.

``assemble`` builds from the plan everything the runner's loop works with: the workload source, the tiers
(each given its command recorder, which forwards to the I/O log), the cache, the request executor, the worker
pool, the cold mover (where a tier has ``cold_after``), the user pool and the arrival process, the measurement
window and the autoscaler, into one frozen ``RunParts``.  The order is the order in which failures must be
reported: the workload source first (a malformed trace is refused before any tier is opened or written), then
every tier built before any is opened (``setup.build_tiers``).  What must exist before set-up (the stop, its
cancel token, the event heap a stop wakes, the telemetry that records even a failed set-up) is the runner's
from its construction and is passed in.  ``dismantle`` is the other end: the run's entries removed and every
tier it opened closed.

The window and the arrival process are built here but start only when the scheduler issues its first
request (``start``): set-up, pre-population and preconditioning are not warm-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvbench_core.contracts.autoscaler import Autoscaler
from kvbench_core.contracts.errors import StorageError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.workload import WorkloadSource
from kvbench_core.engine.cache.cache_types import EvictionPolicy, Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.cancel import CancelToken, CommandRecorder
from kvbench_core.engine.measure.iolog import IOLog
from kvbench_core.engine.measure.window import MeasurementWindow, default_drain_timeout
from kvbench_core.engine.run import setup
from kvbench_core.engine.run.arrivals import Arrivals, ClosedLoopArrivals, OpenLoopArrivals, UserPool, backlog_limit
from kvbench_core.engine.run.cold_mover import ColdMover
from kvbench_core.engine.run.executor import RequestExecutor
from kvbench_core.engine.run.run_state import RunState
from kvbench_core.engine.run.scheduler import EventHeap
from kvbench_core.engine.run.workers import WorkerPool


@dataclass(frozen=True, slots=True)
class RunParts:
    """Everything a run's loop works with, built before it starts; each part keeps its own state."""

    source: WorkloadSource
    tiers: tuple[Tier, ...]
    recorders: tuple[CommandRecorder, ...]  # one per tier: sealed if the drain abandons a worker
    io_log: IOLog | None
    cache: MultiTierCache
    executor: RequestExecutor
    pool: WorkerPool
    mover: ColdMover | None  # None when no tier has cold_after
    users: UserPool
    arrivals: Arrivals
    window: MeasurementWindow
    autoscaler: Autoscaler | None

    def start(self, now: float) -> None:
        """The scheduler issues its first request at ``now``: warm-up and the arrivals' clock begin."""
        self.window.start(now)
        self.arrivals.start(now)
        self.pool.start()
        if self.mover is not None:
            self.mover.start()


@dataclass(frozen=True, slots=True)
class Controls:
    """What the runner owns from its construction and hands to the parts."""

    cancel: CancelToken
    events: EventHeap
    on_storage_error: Callable[[StorageError], None]
    on_crash: Callable[[BaseException], None]


def assemble(state: RunState, controls: Controls) -> RunParts:
    """Build the run's parts; the tiers are opened into ``state.tiers`` as they open, so the ones opened
    before a failure are still closed (``dismantle``).  On a failure the I/O log is closed here."""
    plan = state.plan
    autoscaler = setup.build_autoscaler(plan, state.users)
    state.source = source = setup.build_source(plan, state.users)
    io_log = IOLog(plan.output.io_log) if plan.output.io_log else None  # before the next trial reopens the path
    try:
        return _around_the_tiers(state, controls, source, autoscaler, io_log)
    except BaseException:
        if io_log is not None:
            io_log.close()
        raise


def _around_the_tiers(state: RunState, controls: Controls, source: WorkloadSource, autoscaler: Autoscaler | None,
                      io_log: IOLog | None) -> RunParts:
    """The tiers opened (each with its recorder), then what works on them: the cache, the executor, the
    worker pool, the cold mover, the users and the arrivals, and the window."""
    plan, telemetry = state.plan, state.telemetry
    recorders: list[CommandRecorder] = []

    def recorder_for(tier: str) -> CommandRecorder:
        recorders.append(CommandRecorder(tier, telemetry, io_log=io_log, token=controls.cancel))
        return recorders[-1]

    setup.build_tiers(plan, state.tiers, run_id=state.run_id, client_index=state.client_index,
                      workers=state.worker_count, io_log_for=recorder_for)
    policy = EvictionPolicy(**plan.eviction)
    setup.check_an_entry_fits(state.tiers, state.bytes_per_token, policy.large_entry_limit_ratio)
    max_piece = max(int(t.backend.transfer_size) for t in state.tiers)
    noise = NoisePool(plan.seed, pool_bytes=32 << 20, max_piece=max(max_piece, 1 << 20),
                      kind=plan.payload)  # the declared payload kind (docs/codecs.md)
    cache = MultiTierCache(state.tiers, telemetry, noise.payload, policy=policy, promotion=plan.promotion,
                           cancel=controls.cancel)
    executor = RequestExecutor(cache, telemetry, state.bytes_per_token, plan.workload.decode_batch, pool=noise,
                               verify=plan.verify)
    pool = WorkerPool(state.worker_count, executor, controls.events,
                      generation_s_per_token=plan.workload.generation_s_per_token,
                      on_storage_error=controls.on_storage_error, on_crash=controls.on_crash,
                      priority={name: cls.priority for name, cls in plan.qos.items()})
    mover = (ColdMover(cache, on_storage_error=controls.on_storage_error, on_crash=controls.on_crash)
             if any(tier.cold_after is not None for tier in state.tiers) else None)
    window = _window(state)
    users, limit = UserPool(state.users), backlog_limit(state.worker_count)
    arrivals: Arrivals = (OpenLoopArrivals(source, users, limit=limit, counting=lambda: window.is_open)
                          if source.open_loop else ClosedLoopArrivals(source, users, controls.events, limit))
    return RunParts(source=source, tiers=tuple(state.tiers), recorders=tuple(recorders), io_log=io_log,
                    cache=cache, executor=executor, pool=pool, mover=mover, users=users, arrivals=arrivals,
                    window=window, autoscaler=autoscaler)


def _window(state: RunState) -> MeasurementWindow:
    planned = state.plan.window
    drain = planned.drain_timeout_s
    return MeasurementWindow(warmup_s=planned.warmup_s, duration_s=planned.duration_s,
                             request_limit=planned.request_limit,
                             drain_timeout_s=default_drain_timeout(planned.duration_s) if drain is None
                             else float(drain))


def dismantle(state: RunState, parts: RunParts | None) -> None:
    """Remove every entry this run wrote (unless keep_files) and close the tiers it opened and its I/O log.
    A failure here is listed in the result (``cleanup_errors``), never raised over the run's own outcome."""

    def failed(line: str) -> None:
        state.plugin_sections.setdefault("cleanup_errors", []).append(line)

    if parts is not None and not state.plan.output.keep_files:
        try:
            for tier in state.tiers:
                tier.backend.cleanup_begins()
            parts.cache.clear()
        except Exception as error:  # a kvbench bug: the tiers still close, the result is still written
            state.crash = state.crash or error
            failed(f"cache: {error!r}")
    for tier in state.tiers:
        try:
            tier.backend.close()
        except Exception as error:  # cleanup must not hide the run's own outcome
            failed(f"{tier.name}: {error}")
    if parts is not None and parts.io_log is not None:
        parts.io_log.close()
