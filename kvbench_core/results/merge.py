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

import time
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.engine.run_state import PHASES
from kvbench_core.engine.telemetry import SERIES_COUNTS, series_rates
from kvbench_core.results.checks import run_checks
from kvbench_core.results.document import ResultDocument, RunRecord, SpecRecord
from kvbench_core.results.merge_declaration import merge_declarations
from kvbench_core.results.metrics import Metrics, sum_dicts
from kvbench_core.results.result import rerun_section, spec_section
from kvbench_core.results.status import decide_result, recorded_stop, stamp
from kvbench_core.spec.declaration import contradictions
from kvbench_core.spec.plan import qos_classes

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
    result: dict[str, Any] | None = None  # None: the client ended without reporting one
    released_at: float | None = None  # wall clock right after the start barrier
    ended: str | None = None  # how a client ended that did not report, e.g. "killed by SIGKILL"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.result is None or recorded_stop(self.result["run"]) == "failed"  # an error stopped it

    def describe_failure(self, label: str) -> str:
        """``client 1 (pid 4242 on host) was killed by SIGKILL``: who, and how it ended."""
        where = ", ".join(part for part in (f"pid {self.pid}" if self.pid else "", self.host or "") if part)
        who = f"{label} {self.index}" + (f" ({where})" if where else "")
        if self.result is None:
            return f"{who} {self.ended or 'ended without a result'}"
        return f"{who} failed: {self.result['run']['error'] or self.result['run']['stop_reason']}"


def merge_results(clients: list[ClientReport], *, mode: str, label: str, run_id: str, trial: int,
                  as_written: dict[str, Any], spec: dict[str, Any], started_at: float) -> dict[str, Any]:
    """One result for the whole run; ``clients`` in index order, at least one of them with a result.  Built
    as a ``ResultDocument`` (its sections merged one function each) and stamped with the status the rules
    give it (results/status.py)."""
    reported = [c for c in clients if c.result is not None]
    if not reported:
        raise ValueError("no client reported a result")
    measured = [c.result for c in reported if c.result["metrics"]]
    base = measured[0] if measured else reported[0].result  # a client that got furthest describes the run
    metrics = _merged_metrics(measured, base, spec)
    workload = _merge_workload([c.result["workload"] for c in reported], base["workload"]["source"])
    declaration = _merged_declaration(clients, measured or [base], workload, metrics, label, spec)
    failures = [c.describe_failure(label) for c in clients if c.failed]
    document = ResultDocument(
        format=base["kvbench_result"], kvbench_version=base["kvbench_version"], plugins=base["plugins"],
        run=_merged_run(reported, failures, run_id=run_id, trial=trial, spec=spec, started_at=started_at),
        spec=SpecRecord.from_json(spec_section(spec, as_written)), model=base["model"],
        environment=base["environment"], declaration=declaration,
        warnings=_merged_warnings(reported, label, declaration),
        workload=workload, metrics=metrics, timeseries=tuple(_merge_series([c.result["timeseries"] for c in reported])),
        autoscaling={"trajectory": [], "summary": {}, "note": f"each {label} scales its own users: see "
                                                              "clients[].autoscaling"},
        sections={}, errors=_merged_errors(reported, label),
        scale_out=_scale_out(clients, mode=mode, label=label, spec=spec),
        clients=tuple(_client_section(c, label) for c in clients), checks={})
    merged = document.to_json()
    merged["checks"] = run_checks(merged)
    # The merged counts decide (results/status.py), with every client's own violated invariants beside the
    # merged result's.
    stamp(merged["run"], decide_result(merged, _stopped(reported, failures), _client_violations(reported, label)))
    return merged


def _stopped(reported: list[ClientReport], failures: list[str]) -> str | None:
    """A client's failure fails the run, a client's interruption interrupts it; else it ran to its end."""
    if failures:
        return "failed"
    interrupted = any(c.result is not None and recorded_stop(c.result["run"]) == "interrupted" for c in reported)
    return "interrupted" if interrupted else None


def _merged_metrics(measured: list[dict[str, Any]], base: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The clients' metrics read back, merged and rendered by the one model (empty when none measured)."""
    if not measured:
        return {}
    per_token = base["model"]["bytes_per_token_all_ranks"] if base["model"] else 0
    qos = qos_classes(spec.get("qos"))
    return Metrics.merge([Metrics.from_json(r["metrics"], bytes_per_token=per_token, qos=qos)
                          for r in measured]).to_json()


def _merged_warnings(reported: list[ClientReport], label: str, declaration: dict[str, Any]) -> tuple[str, ...]:
    """Each client's own (a tier no entry of its requests fit), then the merged declaration's contradictions
    (each client's declaration warnings are the merged declaration's to say once)."""
    own = [f"{label} {c.index}: {warning}" for c in reported if c.result is not None
           for warning in c.result.get("warnings") or [] if not warning.startswith("declaration ")]
    return (*own, *contradictions(declaration))


def _merged_errors(reported: list[ClientReport], label: str) -> tuple[dict[str, Any], ...]:
    errors = [{label: c.index, **error} for c in reported if c.result is not None for error in c.result["errors"]]
    return tuple(errors[:MAX_LISTED_ERRORS])


def _client_violations(reported: list[ClientReport], label: str) -> list[str]:
    return [f"{label} {c.index}: {line}" for c in reported if c.result is not None
            for line in (c.result.get("checks") or {}).get("violations") or []]


def _merged_run(reported: list[ClientReport], failures: list[str], *, run_id: str, trial: int,
                spec: dict[str, Any], started_at: float) -> RunRecord:
    """The run section; its status is stamped once the merged result's invariants are known."""
    runs = [c.result["run"] for c in reported if c.result is not None]
    reasons = sorted({run["stop_reason"] for run in runs if run["stop_reason"]})
    return RunRecord(id=run_id, name=spec.get("name"), status="ended",
                     stop_reason="; ".join(failures) if failures else "; ".join(reasons),
                     error="; ".join(failures) if failures else None, trial=trial, client_index=None,
                     started_at=started_at, finished_at=time.time(), traced=any(run["traced"] for run in runs),
                     phases_s=_slowest_phases([run.get("phases_s") or {} for run in runs]),
                     rerun_of=rerun_section(spec).get("rerun_of"))


def _merged_declaration(clients: list[ClientReport], results: list[dict[str, Any]], workload: dict[str, Any],
                        metrics: dict[str, Any], label: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The clients' declarations merged; the concurrency says how the users were spread."""
    counters = (metrics.get("cache") or {}).get("counters") or {}
    declaration = merge_declarations([r["declaration"] for r in results], workload=workload, counters=counters)
    concurrency = declaration.get("workload", {}).get("concurrency")
    if isinstance(concurrency, dict):
        concurrency.update(value=f"{sum(c.users for c in clients)} users over {len(clients)} {label}s "
                                 f"({spec['workload']['users_scope']}), max_inflight "
                                 f"{spec['workload']['max_inflight']} per {label}", source="detected")
    return declaration


def _scale_out(clients: list[ClientReport], *, mode: str, label: str, spec: dict[str, Any]) -> dict[str, Any]:
    users = [c.users for c in clients]
    released = [c.released_at for c in clients if c.released_at is not None]
    return {
        "mode": mode, "label": label, "clients": len(clients),
        "users_scope": spec["workload"]["users_scope"], "users_requested": spec["workload"]["users"],
        "users_per_client": users, "users_total": sum(users), "seeds": [c.seed for c in clients],
        "cache_subdirectory": f"<tier path>/{label}<i>", "hosts": sorted({c.host for c in clients if c.host}),
        "clock_skew_s": round(max(released) - min(released), 6) if len(released) > 1 else 0.0,
        "merge": "percentiles from merged histograms; counts and bytes summed; bandwidth = summed bytes "
                 "over the union of the clients' I/O windows (wall clock); time series aligned by interval",
    }


def _merge_series(series: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Aggregate points by interval index (clients start measuring together and share the interval).

    Counts and occupancy add up; rates are the summed counts over the merged interval's length, never a
    sum of rates measured over different lengths (a client's last, shorter interval would be overweighted).
    Interval percentiles cannot be merged from a point's summary, so they stay in each client's own series."""
    merged = []
    for i in range(max((len(s) for s in series), default=0)):
        points = [s[i] for s in series if i < len(s)]
        span = max(p["interval_s"] for p in points)
        counts = {name: sum(_count(p, name) for p in points) for name in SERIES_COUNTS}
        merged.append({
            "t_s": max(p["t_s"] for p in points), "interval_s": span, "clients": len(points),
            "users": sum(p.get("users", 0) for p in points), "queue": sum(p.get("queue", 0) for p in points),
            **counts, **series_rates(counts, span),
            "occupancy": sum_dicts(p.get("occupancy", {}) for p in points),
            "tiers": _merge_tier_points(points, span),
        })
    return merged


def _count(point: dict[str, Any], name: str) -> float:
    """A point's count; a result written before points carried counts has only the rate."""
    if name in point:
        return point[name]
    rate = {"generated_tokens": "tokens_per_s"}.get(name, f"{name}_per_s")
    return point.get(rate, 0.0) * point["interval_s"]


def _merge_tier_points(points: list[dict[str, Any]], span: float) -> dict[str, dict[str, float]]:
    """Per tier: bytes summed, bandwidth = summed bytes / the merged interval."""
    out: dict[str, dict[str, float]] = {}
    for point in points:
        for tier, figures in (point.get("tiers") or {}).items():
            row = out.setdefault(tier, {})
            for op in ("read", "write"):
                moved = figures.get(f"{op}_bytes", figures.get(f"{op}_bytes_per_s", 0.0) * point["interval_s"])
                row[f"{op}_bytes"] = row.get(f"{op}_bytes", 0) + moved
                row[f"{op}_bytes_per_s"] = row[f"{op}_bytes"] / max(span, 1e-9)
    return out


def _merge_workload(sections: list[dict[str, Any]], source: dict[str, Any]) -> dict[str, Any]:
    stats = [s["stats"] for s in sections]
    return {
        "source": source,
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
def _client_section(client: ClientReport, label: str) -> dict[str, Any]:
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
        "status": result["run"]["status"], "stop_reason": result["run"]["stop_reason"],
        "error": result["run"]["error"], "traced": result["run"]["traced"],
        "phases_s": result["run"].get("phases_s") or {},
        "metrics": _without_histograms(result["metrics"]),
        "workload": {k: v for k, v in result["workload"].items() if k != "source"},
        "timeseries": result["timeseries"],
        "autoscaling": result["autoscaling"],
        "sections": result["sections"],
        "errors": result["errors"],
        "checks": result.get("checks"),
    }


def _without_histograms(metrics: dict[str, Any]) -> dict[str, Any]:
    """A client's metrics without histograms: the merged result holds the merged ones, and N clients'
    bucket tables would dominate the file."""
    if not metrics:
        return {}
    tiers = {name: {key: _drop(value, "histograms") if key in ("read", "write") else value
                    for key, value in tier.items()} for name, tier in metrics["tiers"].items()}
    return {**_drop(metrics, "histograms"), "tiers": tiers}


def _drop(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def _slowest_phases(phases: list[dict[str, float]]) -> dict[str, float]:
    """Each phase as long as the slowest client's: the clients start together and the run waits for all."""
    names = [name for name in PHASES if any(name in p for p in phases)]
    return {name: max(p.get(name, 0.0) for p in phases) for name in names}
