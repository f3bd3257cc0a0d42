"""What a lifecycle hook sees of a run: a snapshot, not the engine's live objects (issue #30 §3).

``kvbench_measurement_started`` and ``kvbench_measurement_finished`` get a ``RunView``.  It is frozen and
holds copies: the tiers as the run opened them (name, backend name, capacity, ``describe()``, the
directory a tier owns) and, at the end, the per-tier latency summaries.  A plugin can read the run but can
neither change what the runner relies on nor reach into a backend mid-run; and because the view is defined
here, in the contracts, a plugin needs nothing from the engine to type its hooks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TierView:
    """One enabled tier, in waterfall order, as the run opened it."""

    name: str  # the tier's name in the spec (``cache.tiers[i].name``)
    backend: str  # the backend's registered name (``cpu``, ``nvme``, a vendor's)
    capacity_bytes: float  # bytes; ``math.inf`` for an unbounded tier
    description: Mapping[str, Any]  # ``StorageBackend.describe()`` taken when the tier opened
    directory: str | None  # the real path of the directory the tier owns, None if it owns none


#: ``{tier: {op: {layer: summary}}}``: ``op`` is read/write, ``layer`` total/host/device, and a summary the
#: latency figures in milliseconds (count, mean, min, max, p50, p95, p99, ...; docs/metrics.md).
LatencySnapshot = Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]


@dataclass(frozen=True)
class RunView:
    """A run as lifecycle hooks see it."""

    run_id: str  # names the run's files; the same in every client of one run
    client_index: int  # 0 for a single-process run; each client of ``--clients``/MPI has its own
    spec: Mapping[str, Any]  # the resolved spec, read-only
    tiers: tuple[TierView, ...]
    measure_start: float | None = None  # ``time.perf_counter()`` when the window opened; None before
    measure_end: float | None = None  # when it closed; None in ``kvbench_measurement_started``
    latency: LatencySnapshot = field(default_factory=dict)  # filled for ``kvbench_measurement_finished``
