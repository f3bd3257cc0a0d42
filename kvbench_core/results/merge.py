"""Merge the results of a run's clients (local processes or MPI ranks) into one result.

The rules (seed §11.6; docs/scale-out.md):

* latency percentiles come from the clients' histograms merged bucket by
  bucket, never from averaging or taking the max of per-client percentiles;
* counts, bytes, tokens and times add up;
* a bandwidth is the summed bytes over the union of the clients' I/O windows
  on the wall clock (each client's monotonic times are converted with its own
  ``window.monotonic_start``), so N clients started together report N times
  the bytes over one common window;
* the metrics are one ``results.metrics.Metrics`` per client, merged and
  rendered by the same code as a single run's (no figure is spelled twice);
* each client keeps its own section (headline, tiers, time series, errors,
  how it ended) under ``clients``.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.engine.measure.telemetry import SERIES_COUNTS, series_rates
from kvbench_core.engine.run.run_state import PHASES
from kvbench_core.results.document import ResultDocument, RunRecord, SpecRecord
from kvbench_core.results.invariants import run_checks
from kvbench_core.results.merge_declaration import merge_declarations
from kvbench_core.results.metrics import Metrics, sum_dicts
from kvbench_core.results.result import rerun_section, spec_section
from kvbench_core.results.status import decide_result, stamp
from kvbench_core.runspec.declaration import contradictions
from kvbench_core.runspec.plan import qos_classes

MAX_LISTED_ERRORS = 100


@dataclass
class ClientReport:
    """Everything the coordinator knows about one client after a trial."""

    index: int
    run_id: str
    seed: int
    users: int
    directories: list[str]
    host: str | None = None
    pid: int | None = None
    result: ResultDocument | None = None  # None: the client ended without reporting one
    released_at: float | None = None  # wall clock right after the start barrier
    ended: str | None = None  # how a client ended that did not report, e.g. "killed by SIGKILL"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.result is None or self.result.run.recorded_stop == "failed"  # an error stopped it

    def describe_failure(self, label: str) -> str:
        """``client 1 (pid 4242 on host) was killed by SIGKILL``: who, and how it ended."""
        where = ", ".join(part for part in (f"pid {self.pid}" if self.pid else "", self.host or "") if part)
        who = f"{label} {self.index}" + (f" ({where})" if where else "")
        if self.result is None:
            return f"{who} {self.ended or 'ended without a result'}"
        return f"{who} failed: {self.result.run.error or self.result.run.stop_reason}"


def merge_results(clients: list[ClientReport], *, mode: str, label: str, run_id: str, trial: int,
                  as_written: dict[str, Any], spec: dict[str, Any], started_at: float,
                  users_scope: str | None = None) -> dict[str, Any]:
    """One result for the whole run; ``clients`` in index order, at least one of them with a result.  Built
    as a ``ResultDocument`` (its sections merged one function each) and stamped with the status the rules
    give it (results/status.py).  ``users_scope``: how the users were spread, when not the spec's own
    (worker processes always split them)."""
    scope = users_scope or spec["workload"]["users_scope"]
    results = [c.result for c in clients if c.result is not None]
    if not results:
        raise ValueError("no client reported a result")
    measured = [result for result in results if result.metrics]
    base = measured[0] if measured else results[0]  # a client that got furthest describes the run
    metrics = _merged_metrics(measured, base, spec)
    workload = _merge_workload(results, base)
    declaration = _merged_declaration(clients, measured or [base], workload, metrics, label, spec, scope)
    failures = [c.describe_failure(label) for c in clients if c.failed]
    reported = [c for c in clients if c.result is not None]
    document = ResultDocument(
        format=base.format, kvbench_version=base.kvbench_version, plugins=base.plugins,
        run=_merged_run(results, failures, run_id=run_id, trial=trial, spec=spec, started_at=started_at),
        spec=SpecRecord.from_json(spec_section(spec, as_written)), model=base.model,
        environment=base.environment, declaration=declaration,
        warnings=_merged_warnings(reported, label, declaration),
        workload=workload, metrics=metrics, timeseries=tuple(_merge_series(results, metrics, spec)),
        autoscaling={"trajectory": [], "summary": {}, "note": f"each {label} scales its own users: see "
                                                              "clients[].autoscaling"},
        sections={}, errors=_merged_errors(reported, label),
        scale_out=_scale_out(clients, mode=mode, label=label, spec=spec, users_scope=scope),
        clients=tuple(_client_section(c, label, metrics.get("window")) for c in clients), checks={})
    merged = document.to_json()
    merged["checks"] = run_checks(merged)
    # The merged counts decide (results/status.py), with every client's own violated invariants beside the
    # merged result's.
    stamp(merged["run"], decide_result(merged, _stopped(results, failures), _client_violations(reported, label)))
    return merged


def _stopped(results: list[ResultDocument], failures: list[str]) -> str | None:
    """A client's failure fails the run, a client's interruption interrupts it; else it ran to its end."""
    if failures:
        return "failed"
    return "interrupted" if any(result.run.recorded_stop == "interrupted" for result in results) else None


def _merged_metrics(measured: list[ResultDocument], base: ResultDocument, spec: dict[str, Any]) -> dict[str, Any]:
    """The clients' metrics read back, merged and rendered by the one model (empty when none measured)."""
    if not measured:
        return {}
    qos = qos_classes(spec.get("qos"))
    return Metrics.merge([Metrics.from_json(dict(r.metrics), bytes_per_token=base.bytes_per_token, qos=qos)
                          for r in measured]).to_json()


def _merged_warnings(reported: list[ClientReport], label: str, declaration: dict[str, Any]) -> tuple[str, ...]:
    """Each client's own (a tier no entry of its requests fit), then the merged declaration's contradictions
    (each client's declaration warnings are the merged declaration's to say once)."""
    own = [f"{label} {c.index}: {warning}" for c in reported if c.result is not None
           for warning in c.result.warnings if not warning.startswith("declaration ")]
    return (*own, *contradictions(declaration))


def _merged_errors(reported: list[ClientReport], label: str) -> tuple[dict[str, Any], ...]:
    errors = [{label: c.index, **error} for c in reported if c.result is not None for error in c.result.errors or ()]
    return tuple(errors[:MAX_LISTED_ERRORS])


def _client_violations(reported: list[ClientReport], label: str) -> list[str]:
    return [f"{label} {c.index}: {line}" for c in reported if c.result is not None
            for line in c.result.checks.get("violations") or []]


def _merged_run(results: list[ResultDocument], failures: list[str], *, run_id: str, trial: int,
                spec: dict[str, Any], started_at: float) -> RunRecord:
    """The run section; its status is stamped once the merged result's invariants are known."""
    runs = [result.run for result in results]
    reasons = sorted({run.stop_reason for run in runs if run.stop_reason})
    return RunRecord(id=run_id, name=spec.get("name"), status="ended",
                     stop_reason="; ".join(failures) if failures else "; ".join(reasons),
                     error="; ".join(failures) if failures else None, trial=trial, client_index=None,
                     started_at=started_at, finished_at=time.time(), traced=any(run.traced for run in runs),
                     phases_s=_slowest_phases([run.phases_s or {} for run in runs]),
                     rerun_of=rerun_section(spec).get("rerun_of"))


def _merged_declaration(clients: list[ClientReport], results: list[ResultDocument], workload: dict[str, Any],
                        metrics: dict[str, Any], label: str, spec: dict[str, Any], scope: str) -> dict[str, Any]:
    """The clients' declarations merged; the concurrency says how the users were spread."""
    counters = (metrics.get("cache") or {}).get("counters") or {}
    declaration = merge_declarations([dict(r.declaration) for r in results], workload=workload, counters=counters)
    concurrency = declaration.get("workload", {}).get("concurrency")
    if isinstance(concurrency, dict):
        inflight = (f"{spec['workload']['max_inflight']} in all" if mode_splits(label)
                    else f"{spec['workload']['max_inflight']} per {label}")
        concurrency.update(value=f"{sum(c.users for c in clients)} users over {len(clients)} {plural(label)} "
                                 f"({scope}), max_inflight {inflight}", source="detected")
    return declaration


def plural(label: str) -> str:
    """``clients``, ``ranks``, ``processes``: how a result names several of its ``label``."""
    return f"{label}es" if label.endswith("s") else f"{label}s"


def mode_splits(label: str) -> bool:
    """Whether the parts labelled so split one run (worker processes) rather than each run all of it."""
    return label == "process"


def _scale_out(clients: list[ClientReport], *, mode: str, label: str, spec: dict[str, Any],
               users_scope: str) -> dict[str, Any]:
    users = [c.users for c in clients]
    released = [c.released_at for c in clients if c.released_at is not None]
    return {
        "mode": mode, "label": label, "clients": len(clients),
        "users_scope": users_scope, "users_requested": spec["workload"]["users"],
        "users_per_client": users, "users_total": sum(users), "seeds": [c.seed for c in clients],
        "cache_subdirectory": f"<tier path>/{label}<i>", "hosts": sorted({c.host for c in clients if c.host}),
        "clock_skew_s": round(max(released) - min(released), 6) if len(released) > 1 else 0.0,
        "merge": "percentiles from merged histograms; counts and bytes summed; bandwidth = summed bytes "
                 "over the union of the clients' I/O windows (wall clock); time series on one wall-clock interval grid",
    }


def _merge_series(results: list[ResultDocument], metrics: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The clients' points on one wall-clock interval grid: ``output.interval`` steps from the merged window's start
    (the first client's window open) to its end (the last one's close), the last one partial, so the merged
    series covers the merged window as a single run's covers its own and is checked the same way.

    Each client's point covers a wall-clock span (its window's open, ``metrics.window.started_at``, is its
    offset to the common start, plus the point's ``t_s``); its counts go to the grid intervals it overlaps in
    proportion to the overlap, apportioned in whole units (largest remainder), so they stay integers and add
    up exactly.  Rates are an interval's summed counts over its own length, never a sum of rates.  Users,
    queue and occupancy are gauges: each client's latest point ending by the interval's end (or covering it).
    Interval percentiles cannot be merged from a point's summary, so they stay in each client's own series."""
    window = metrics.get("window") or {}
    if window.get("started_at") is None or window.get("ended_at") is None:
        return []
    edges = _grid(window["started_at"], window["ended_at"], float(spec["output"]["interval"]))
    spans = [_wall_points(result) for result in results]
    counts: list[dict[str, float]] = [dict.fromkeys(SERIES_COUNTS, 0) for _ in edges[1:]]
    tiers: list[dict[str, dict[str, float]]] = [{} for _ in edges[1:]]
    present: list[int] = [0] * (len(edges) - 1)
    for points in spans:
        for index in {i for a, b, point in points for i in _place(point, _shares(a, b, edges), counts, tiers)}:
            present[index] += 1
    return [_grid_point(edges, i, counts[i], tiers[i], present[i], spans) for i in range(len(edges) - 1)]


def _place(point: dict[str, Any], shares: list[tuple[int, float]], counts: list[dict[str, float]],
           tiers: list[dict[str, dict[str, float]]]) -> list[int]:
    """A client's point's counts and tier bytes into the grid intervals of ``shares``; those intervals."""
    for name in SERIES_COUNTS:
        _spread(counts, name, _count(point, name), shares)
    for tier, figures in (point.get("tiers") or {}).items():
        for op in ("read", "write"):
            moved = figures.get(f"{op}_bytes", figures.get(f"{op}_bytes_per_s", 0.0) * point["interval_s"])
            _spread([row.setdefault(tier, {}) for row in tiers], f"{op}_bytes", moved, shares)
    return [index for index, _ in shares]


def _grid(start: float, end: float, step_s: float) -> list[float]:
    """The grid's edges: ``step_s`` apart from ``start``, the last one ``end`` (a shorter last interval)."""
    edges = [start]
    while edges[-1] < end - 1e-6:
        edges.append(min(edges[-1] + step_s, end))
    edges[-1] = end
    return edges if len(edges) > 1 else []


def _wall_points(result: ResultDocument) -> list[tuple[float, float, Mapping[str, Any]]]:
    """A client's points as (wall start, wall end, point); none for a client that measured nothing."""
    opened = result.window.get("started_at")
    if opened is None:
        return []
    return [(opened + p["t_s"] - p["interval_s"], opened + p["t_s"], p) for p in result.series]


def _shares(a: float, b: float, edges: list[float]) -> list[tuple[int, float]]:
    """(grid interval, share) of point [a, b]: its overlap with each interval ÷ its overlap with the whole grid,
    so a point is placed whole even where clock rounding puts an edge a millisecond outside the grid; an empty
    point (or one outside) goes wholly to the interval holding its instant."""
    inside = min(b, edges[-1]) - max(a, edges[0])
    if inside <= 0:
        instant = min(max(a, edges[0]), edges[-1])
        return [(min(bisect.bisect_right(edges, instant), len(edges) - 1) - 1, 1.0)]
    shares = [(i, (min(b, right) - max(a, left)) / inside) for i, (left, right) in enumerate(itertools.pairwise(edges))
              if min(b, right) > max(a, left)]
    whole = sum(share for _, share in shares)
    return [(i, share / whole) for i, share in shares]


def _spread(rows: list[dict[str, float]], name: str, total: float, shares: list[tuple[int, float]]) -> None:
    """Add ``total`` to ``rows[i][name]`` by the shares: whole units by largest remainder for a count (so the
    parts are integers that add up to it), in proportion for a rate-derived float (an old result's)."""
    if isinstance(total, int):
        parts = [int(total * share) for _, share in shares]
        order = sorted(range(len(shares)), key=lambda k: total * shares[k][1] - parts[k], reverse=True)
        for k in order[:total - sum(parts)]:
            parts[k] += 1
    else:
        parts = [total * share for _, share in shares]
    for (index, _), part in zip(shares, parts, strict=True):
        rows[index][name] = rows[index].get(name, 0) + part


def _grid_point(edges: list[float], i: int, counts: dict[str, float], tiers: dict[str, dict[str, float]],
                clients: int, spans: list[list[tuple[float, float, dict[str, Any]]]]) -> dict[str, Any]:
    """Interval ``i`` of the merged grid: its counts, rates over its length, and the clients' gauges."""
    left, right = edges[i], edges[i + 1]
    span = right - left
    gauges = [gauge for gauge in (_gauge(points, right) for points in spans) if gauge is not None]
    for row in tiers.values():
        for op in ("read", "write"):
            row[f"{op}_bytes"] = row.get(f"{op}_bytes", 0)
            row[f"{op}_bytes_per_s"] = row[f"{op}_bytes"] / max(span, 1e-9)
    return {"t_s": round(right - edges[0], 3), "interval_s": round(span, 3), "clients": clients,
            "users": sum(p.get("users", 0) for p in gauges), "queue": sum(p.get("queue", 0) for p in gauges),
            **counts, **series_rates(counts, span),
            "occupancy": sum_dicts(p.get("occupancy", {}) for p in gauges), "tiers": tiers}


def _gauge(points: list[tuple[float, float, dict[str, Any]]], right: float) -> dict[str, Any] | None:
    """A client's state at the grid interval's end: its latest point ending by then, else one covering it."""
    ended = [p for a, b, p in points if b <= right + 1e-6]
    if ended:
        return ended[-1]
    return next((p for a, b, p in points if a <= right), None)


def _count(point: dict[str, Any], name: str) -> float:
    """A point's count; a result written before points carried counts has only the rate."""
    if name in point:
        return point[name]
    rate = {"generated_tokens": "tokens_per_s"}.get(name, f"{name}_per_s")
    return point.get(rate, 0.0) * point["interval_s"]


def _merge_workload(results: list[ResultDocument], base: ResultDocument) -> dict[str, Any]:
    """The clients' workloads: counts summed, length statistics merged where they merge exactly; the source as
    ``base`` (the client that describes the run) ran it."""
    sections = [result.workload or {} for result in results]
    stats = [s["stats"] for s in sections]
    return {
        "source": (base.workload or {})["source"],
        "stats": {"input_length": _merge_length_stats([s["input_length"] for s in stats]),
                  "generation_length": _merge_length_stats([s["generation_length"] for s in stats]),
                  "requests_issued": sum(s["requests_issued"] for s in stats)},
        "preload": sum_dicts(s["preload"] for s in sections),
        "precondition": None,
        "users_final": sum(s["users_final"] for s in sections),
        "workers": sum(s["workers"] for s in sections),
    }


def _merge_length_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Count, mean and max merge exactly; sample percentiles do not (they stay per client)."""
    counted = [s for s in stats if s["count"]]
    count = sum(s["count"] for s in counted)
    return {"count": count,
            "mean": round(sum(s["mean"] * s["count"] for s in counted) / count, 2) if count else None,
            "p50": None, "p90": None, "p99": None,
            "max": max((s["max"] for s in counted), default=None)}


# -- per-client sections -------------------------------------------------------------------------------
def _client_section(client: ClientReport, label: str, window: dict[str, Any] | None) -> dict[str, Any]:
    """One client's own figures; ``window_offset_s`` is its window's open after the first client's (wall
    clock): where its own series' points sit on the merged grid."""
    section: dict[str, Any] = {
        "index": client.index, "host": client.host, "pid": client.pid, "run_id": client.run_id,
        "seed": client.seed, "users": client.users, "directories": client.directories,
        "released_at": client.released_at, "ended": client.ended, **client.extra,
    }
    result = client.result
    if result is None:
        return {**section, "status": "failed", "stop_reason": client.describe_failure(label), "error": None}
    return {
        **section,
        "status": result.run.status, "stop_reason": result.run.stop_reason,
        "error": result.run.error, "traced": result.run.traced,
        "phases_s": result.run.phases_s or {},
        "window_offset_s": _offset(result, window),
        "metrics": _without_histograms(result.metrics),
        "workload": {k: v for k, v in (result.workload or {}).items() if k != "source"},
        "timeseries": list(result.series),
        "autoscaling": result.autoscaling,
        "sections": result.sections,
        "errors": list(result.errors or ()),
        "checks": result.checks,
    }


def _offset(result: ResultDocument, window: dict[str, Any] | None) -> float | None:
    opened = result.window.get("started_at")
    return None if opened is None or not window or window.get("started_at") is None \
        else round(opened - window["started_at"], 6)


def _without_histograms(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A client's metrics without histograms: the merged result holds the merged ones, and N clients'
    bucket tables would dominate the file."""
    if not metrics:
        return {}
    tiers = {name: {key: _drop(value, "histograms") if key in ("read", "write") else value
                    for key, value in tier.items()} for name, tier in metrics["tiers"].items()}
    return {**_drop(metrics, "histograms"), "tiers": tiers}


def _drop(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def _slowest_phases(phases: list[dict[str, float]]) -> dict[str, float]:
    """Each phase as long as the slowest client's: the clients start together and the run waits for all."""
    names = [name for name in PHASES if any(name in p for p in phases)]
    return {name: max(p.get(name, 0.0) for p in phases) for name in names}
