"""The autoscaler contract: telemetry in, a user count out, through the hook interface only.

The runner samples telemetry every ``interval_s`` and hands the autoscaler a
``TelemetrySample``; the autoscaler answers with a ``Decision``.  Built-in and
third-party autoscalers see exactly the same data.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench_core.contracts.configurable import Configurable

#: The seed samples telemetry every 5 s: the decision period of an autoscaler that declares none.
SEED_SAMPLING_PERIOD_S = 5.0


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    """One interval of the measured window, as the autoscaler sees it."""

    t_s: float  # seconds since the measured window opened
    users: int
    requests: int
    generated_tokens_per_s: float  # generated tokens / s over the sample (docs/metrics.md)
    context_tokens_per_s: float  # context (prompt) tokens / s of the same requests
    read_bytes_per_s: float
    write_bytes_per_s: float
    e2e_p95_s: dict[str, float]  # per QoS class, end-to-end p95 over the interval (absent: no data)
    e2e_p99_s: dict[str, float]
    service_p95_s: dict[str, float]  # per QoS class, enqueued -> storage work done (no generation pacing)
    service_p99_s: dict[str, float]
    sla_p95_s: dict[str, float]  # per QoS class target
    sla_p99_s: dict[str, float]
    storage_p95_s: float
    #: Per QoS class, the service-latency histogram of this interval's requests that were issued at the
    #: current load (``LatencyHistogram``: ``count``, ``quantile``, ``merge``, ``points``, ``to_dict``), so a
    #: judged step merges its intervals' bucket counts instead of taking the worst of their p95s.
    service_histograms: dict[str, Any] = field(default_factory=dict)
    #: Seconds those requests spent per part: ``queue``, and ``"<tier> <op> device"`` / ``"... host"``.
    service_split_s: dict[str, float] = field(default_factory=dict)
    #: Per tier, ``read``/``write`` bytes per second over the interval (the time series' tier bytes).
    tier_bytes_per_s: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Open loop: the load is the arrival rate, set by ``Decision.arrival_scale``; ``users`` does not set it.
    open_loop: bool = False
    #: Requests issued at the current load whose storage failed (or found no tier with room) this interval.
    failed_requests: int = 0

    @property
    def throughput_tokens_per_s(self) -> float:
        """The MLPerf name: an alias of ``generated_tokens_per_s`` (as ``avg_throughput_tokens_per_sec`` is)."""
        return self.generated_tokens_per_s


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do next.  ``converged`` lets the run stop early when the spec asks for it."""

    users: int
    action: str  # scale_up | scale_down | hold | stabilized | peak_found | cooldown
    saturation: float | None = None
    converged: bool = False
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: Open loop: the arrival rate as a multiple of the workload source's own (1.0: as the spec says it);
    #: None leaves it as it is.  A closed loop ignores it (its load is ``users``).
    arrival_scale: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Autoscaler(Configurable, abc.ABC):
    """Register via the ``kvbench_autoscalers`` hook; ``check_options`` may refuse a band whose edges cross."""

    def __init__(self, options: dict[str, Any], *, initial_users: int, max_users: int) -> None:
        super().__init__(options)
        self.initial_users = initial_users
        self.max_users = max_users

    @property
    def interval_s(self) -> float:
        """Seconds between decisions: the ``interval_s`` option (give it a schema ``default``); an
        autoscaler whose schema has no such option decides at the seed's sampling period."""
        return float(self.options.get("interval_s", SEED_SAMPLING_PERIOD_S))

    @abc.abstractmethod
    def decide(self, sample: TelemetrySample) -> Decision:
        """The next user count for the telemetry of the interval that just ended."""

    def summary(self) -> dict[str, Any]:
        """The stabilised figure for the result (e.g. max sustainable users, peak throughput)."""
        return {}
