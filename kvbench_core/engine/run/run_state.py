"""What a run did (``RunState``, for the result builder) and what plugins may see of it (``RunView``).

The runner fills ``RunState`` as it goes: its fields are declared here and only here (slots: no attribute
is born during a run); what the loop works with is ``parts.RunParts``, built before it.  Lifecycle hooks get
a ``RunView`` instead (``run_view``, the type in ``contracts.lifecycle``): a frozen snapshot of the run's id,
spec, tiers, window and latency summaries, so a plugin can read the run but holds none of the runner's live
objects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kvbench_core.contracts.errors import UserError
from kvbench_core.contracts.lifecycle import RunView, TierView
from kvbench_core.contracts.workload import WorkloadSource
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.runspec.plan import RunPlan

#: ``run.phases_s``'s phases, in the order they follow one another (docs/metrics.md).
PHASES = ("setup", "warmup", "measured", "drain", "cleanup")

@dataclass
class RunClock:
    """When each phase of a run began and ended (``time.perf_counter``); None for a phase never reached."""

    started: float | None = None  # Runner.run called: set-up (tiers, source, pre-population) begins
    issuing: float | None = None  # the scheduler issues its first request: warm-up begins
    drain_ended: float | None = None  # the last in-flight operation finished or was cancelled (and joined)
    cleanup_started: float | None = None
    cleanup_ended: float | None = None  # every entry deleted and every tier closed

    def phases_s(self, measure_start: float | None, measure_end: float | None) -> dict[str, float]:
        """Seconds of set-up, warm-up, the measured window, the drain and cleanup: consecutive, so they add
        up to the run's wall time from ``started`` to ``cleanup_ended`` (docs/metrics.md, ``run.phases_s``)."""
        end_of_setup = self.issuing if self.issuing is not None else self.cleanup_started
        end_of_issuing = self.drain_ended if self.drain_ended is not None else end_of_setup
        marks = [self.started, end_of_setup, measure_start if measure_start is not None else end_of_issuing,
                 measure_end if measure_end is not None else end_of_issuing, end_of_issuing,
                 self.cleanup_ended]
        if any(mark is None for mark in marks):
            return {}
        return {name: round(max(0.0, later - earlier), 6)  # microseconds, as the window's figures
                for name, earlier, later in zip(PHASES, marks[:-1], marks[1:], strict=True)}


@dataclass(slots=True)
class RunState:
    """What the run did, for the result builder."""

    run_id: str
    plan: RunPlan
    client_index: int = 0
    telemetry: Telemetry = field(init=False)  # from the start: a set-up that fails is still reported
    tiers: list[Tier] = field(default_factory=list)  # as they opened (closed at the end, even after a failure)
    source: WorkloadSource | None = None  # once built
    #: How the run's stop labelled it: ``failed`` (an error), ``interrupted`` (a signal), or ``ended`` once it ran
    #: to its end; the result builder then sets the run's status (completed, degraded, ...), which is decided
    #: from the result's own counts and checks (results/status.py).
    status: str = "running"
    stop_reason: str = ""
    error: UserError | None = None
    measure_start_wall: float | None = None
    measure_end_wall: float | None = None
    measure_start: float | None = None
    measure_end: float | None = None
    autoscaling: list[dict[str, Any]] = field(default_factory=list)
    autoscaler_summary: dict[str, Any] = field(default_factory=dict)
    preload: dict[str, Any] = field(default_factory=dict)
    precondition: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)  # what the plan got wrong, not refused: a tier too small
    smallest_entry_bytes: int | None = None  # of the KV entries the requests wrote (or tried to)
    #: Of the requests *served* in the measured window: what the declaration's workload statistics describe.
    workload_samples: dict[str, list[int]] = field(default_factory=lambda: {"context": [], "generate": [],
                                                                            "prefix": []})
    requests_issued: int = 0  # issued inside the measured window (completed + failed + unfinished)
    unfinished_requests: int = 0
    drain: dict[str, Any] = field(default_factory=dict)  # after the duration: what finished, moved, was cancelled
    arrivals: dict[str, Any] = field(default_factory=dict)  # offered vs served load (workload.arrivals)
    cache_state: str | None = None  # cold | warm | steady when the window opened (engine/cache/cache_figures.py)
    occupancy_at_end: dict[str, dict[str, Any]] = field(default_factory=dict)  # before cleanup empties it
    plugin_sections: dict[str, Any] = field(default_factory=dict)
    users_final: int = 0
    crash: BaseException | None = None  # an unexpected exception (a bug), re-raised after the result is saved
    clock: RunClock = field(default_factory=RunClock)

    def __post_init__(self) -> None:
        self.telemetry = Telemetry(list(self.plan.qos))

    @property
    def model(self) -> Any:
        return self.plan.model

    @property
    def bytes_per_token(self) -> int:
        """Every TP rank stores its own object, so the storage sees all ranks' bytes per token."""
        return self.plan.model.bytes_per_token_all_ranks

    @property
    def users(self) -> int:
        """The users this client drives at the start."""
        return self.plan.users_for_client(self.client_index)

    @property
    def worker_count(self) -> int:
        return self.plan.workers(self.users)

    @property
    def spec(self) -> Mapping[str, Any]:
        """The resolved spec the plan was made from (frozen): the record the result embeds."""
        return self.plan.spec

    @property
    def measured_s(self) -> float:
        """Length of the measured window (the duration, not the drain)."""
        if self.measure_start is None or self.measure_end is None:
            return 0.0
        return self.measure_end - self.measure_start


def run_view(state: RunState) -> RunView:
    """The snapshot lifecycle hooks get (``contracts.lifecycle``): copies of the tiers' public facts and, once
    the window has closed, of the latency summaries, so no hook holds a live backend or the telemetry."""
    tiers = tuple(TierView(name=tier.name, backend=tier.backend.name, capacity_bytes=tier.capacity,
                           description=MappingProxyType(dict(tier.description)), directory=_directory(tier))
                  for tier in state.tiers)
    return RunView(run_id=state.run_id, client_index=state.client_index, spec=state.spec, tiers=tiers,
                   measure_start=state.measure_start, measure_end=state.measure_end,
                   latency=_latency(state.telemetry) if state.measure_end is not None else {})


def _directory(tier: Tier) -> str | None:
    option = tier.backend.directory_option
    path = tier.backend.options.get(option) if option else None
    return os.path.realpath(path) if isinstance(path, str) else None


def _latency(telemetry: Telemetry) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    return {tier: {op: {"total": stats.total.summary(), "host": stats.host.summary(),
                        "device": stats.device.summary()} for op, stats in ops.items()}
            for tier, ops in telemetry.tiers.items()}
