"""``output.metrics: {port: N}``: live OpenMetrics while a run runs, for Prometheus and Grafana.

prometheus-client serves ``http://HOST:PORT/metrics`` (HOST ``127.0.0.1`` unless the spec says otherwise:
a benchmark host is rarely meant to be scraped from outside) from the moment the session starts until it
ends.  Nothing is counted twice: a scrape reads the run's own telemetry (``engine/measure/telemetry``, under its
lock) and the last progress point, and turns them into metric families on the spot, so the run pays
nothing between scrapes (no per-operation hook, no second set of counters):

- ``kvbench_phase{phase}`` (1 for the current phase: setup, warmup, measure, drain, results),
  ``kvbench_users``, ``kvbench_run_info{run_id, spec}``;
- per tier and op (read/write): ``kvbench_tier_bytes_total`` (device bytes, ``physical_bytes``),
  ``kvbench_tier_operations_total``, ``kvbench_tier_commands_total``, ``kvbench_tier_errors_total``, and
  ``kvbench_tier_latency_seconds`` (a histogram of whole operations, ``total`` layer);
- per QoS class: ``kvbench_requests_total`` and ``kvbench_request_service_seconds`` (queue wait +
  storage, what the SLA judges) and ``kvbench_request_e2e_seconds`` histograms.

The tier and request figures are the measured window's: they start at 0 when the window opens (a
counter reset, which ``rate()`` handles) and stop with it.  Histogram buckets are fixed bounds
(``LE_BOUNDS_S``) filled from the run's DDSketch buckets, each sample placed by its bucket's upper
bound, so a bound is exact to the sketch's 1 % (docs/live-metrics.md).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kvbench_core.contracts.errors import UserError
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.exports.requires import optional_module

EXTRA = "metrics"
PHASES = ("setup", "warmup", "measure", "drain", "results")
#: Prometheus histogram bounds in seconds: 50 us .. 60 s, about three per decade.
LE_BOUNDS_S = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
               10.0, 30.0, 60.0)


def metrics_settings(metrics: Any) -> dict[str, Any]:
    """``output.metrics`` with its schema defaults (the host) filled, from the schema, where they live."""
    from kvbench_core.runspec.spec_schema import core_schema

    fragment = core_schema()["properties"]["output"]["properties"]["metrics"]
    return with_defaults(fragment, dict(metrics))


def _buckets(histogram: LatencyHistogram) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs of ``histogram`` at ``LE_BOUNDS_S`` and ``+Inf``."""
    gamma = (1 + histogram.accuracy) / (1 - histogram.accuracy)
    edges = sorted((gamma ** index, count) for index, count in histogram.buckets.items())
    out, seen, position = [], histogram.zeros, 0
    for bound in LE_BOUNDS_S:
        while position < len(edges) and edges[position][0] <= bound * (1 + 1e-12):
            seen += edges[position][1]
            position += 1
        out.append((repr(bound), float(seen)))
    out.append(("+Inf", float(histogram.count)))
    return out


def _copy(histogram: LatencyHistogram) -> LatencyHistogram:
    copy = LatencyHistogram(histogram.accuracy)
    copy.merge(histogram)
    return copy


class RunCollector:
    """A prometheus-client collector over the session's current runner and its last progress point."""

    def __init__(self, runner_of: Any, spec_name: str) -> None:
        self._runner_of = runner_of  # () -> the trial's Runner, or None before it exists
        self._spec_name = spec_name
        self.point: dict[str, Any] = {"phase": "setup"}

    def observe(self, point: dict[str, Any]) -> None:
        self.point = {**self.point, **point}

    def _snapshot(self) -> tuple[str | None, dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(run id, tiers: {tier: {op: OpStats figures}}, service and e2e histograms by class), copied under
        the telemetry's lock, so a scrape never reads a histogram a worker is adding to."""
        state = getattr(self._runner_of(), "state", None)
        run_id, telemetry = getattr(state, "run_id", None), getattr(state, "telemetry", None)
        if telemetry is None:
            return run_id, {}, {}, {}
        with telemetry._lock:
            tiers = {tier: {op: {"bytes": stats.physical_bytes or stats.bytes, "ops": stats.ops,
                                 "commands": stats.commands, "errors": stats.errors, "latency": _copy(stats.total)}
                            for op, stats in ops.items()} for tier, ops in telemetry.tiers.items()}
            service = {qos: _copy(h) for qos, h in telemetry.service.items()}
            e2e = {qos: _copy(h) for qos, h in telemetry.e2e.items()}
        return run_id, tiers, service, e2e

    def collect(self) -> Iterator[Any]:
        core = optional_module("prometheus_client.core", EXTRA, "output.metrics")
        run_id, tiers, service, e2e = self._snapshot()
        info = core.InfoMetricFamily("kvbench_run", "the run being measured", labels=["spec"])
        info.add_metric([self._spec_name], {"run_id": run_id or ""})
        yield info
        phase = core.GaugeMetricFamily("kvbench_phase", "1 for the run's current phase", labels=["phase"])
        for name in PHASES:
            phase.add_metric([name], 1.0 if self.point.get("phase") == name else 0.0)
        yield phase
        yield core.GaugeMetricFamily("kvbench_users", "users driving requests", value=self.point.get("users", 0))
        yield from self._tier_families(core, tiers)
        requests = core.CounterMetricFamily("kvbench_requests", "requests completed in the measured window",
                                            labels=["qos_class"])
        for qos, histogram in service.items():
            requests.add_metric([qos], histogram.count)
        yield requests
        for name, what, histograms in (("service", "queue wait + storage", service),
                                       ("e2e", "end to end, generation included", e2e)):
            family = core.HistogramMetricFamily(f"kvbench_request_{name}_seconds", f"request latency: {what}",
                                                labels=["qos_class"], unit="seconds")
            for qos, histogram in histograms.items():
                family.add_metric([qos], _buckets(histogram), sum_value=histogram.total)
            yield family

    @staticmethod
    def _tier_families(core: Any, tiers: dict[str, Any]) -> Iterator[Any]:
        labels = ["tier", "op"]
        counters = {key: core.CounterMetricFamily(f"kvbench_tier_{key}", what, labels=labels)
                    for key, what in (("bytes", "device bytes moved in the measured window"),
                                      ("operations", "operations completed"), ("commands", "device commands"),
                                      ("errors", "operations that failed"))}
        latency = core.HistogramMetricFamily("kvbench_tier_latency_seconds", "latency of one tier operation",
                                             labels=labels, unit="seconds")
        for tier, ops in tiers.items():
            for op, figures in ops.items():
                counters["bytes"].add_metric([tier, op], figures["bytes"])
                counters["operations"].add_metric([tier, op], figures["ops"])
                counters["commands"].add_metric([tier, op], figures["commands"])
                counters["errors"].add_metric([tier, op], figures["errors"])
                total = figures["latency"]
                latency.add_metric([tier, op], _buckets(total), sum_value=total.total if total.count else 0.0)
        yield from counters.values()
        yield latency


class _WatchedPrinter:
    """The session's progress printer, with every point also shown to the collector."""

    def __init__(self, printer: Any, collector: RunCollector) -> None:
        self._printer, self._collector = printer, collector

    def __call__(self, point: dict[str, Any]) -> None:
        self._collector.observe(point)
        self._printer(point)

    def phase(self, name: str) -> None:
        self._collector.observe({"phase": name})
        self._printer.phase(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._printer, name)


class LiveMetrics:
    """What the session holds: ``watch(printer)`` feeds the collector; a no-op without ``output.metrics``."""

    def __init__(self, collector: RunCollector | None = None) -> None:
        self.collector = collector

    def watch(self, printer: Any) -> Any:
        return printer if self.collector is None else _WatchedPrinter(printer, self.collector)


def require_metrics(metrics: Any) -> None:
    """The metrics extra and a free port, when ``output.metrics`` asks for them: what the session needs
    first, which the dry run asks too (a missing package or a port in use is one line, before anything)."""
    if metrics:
        optional_module("prometheus_client", EXTRA, "output.metrics")
        settings = metrics_settings(metrics)
        with socket.socket(socket.AF_INET6 if ":" in settings["host"] else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the HTTP server binds it
            try:
                probe.bind((settings["host"], settings["port"]))
            except OSError as error:
                raise _cannot_serve(settings, error) from None


def _cannot_serve(settings: dict[str, Any], error: OSError) -> UserError:
    return UserError(f"output.metrics: cannot serve on {settings['host']}:{settings['port']}: "
                     f"{error.strerror or error}")


@contextmanager
def live_metrics(metrics: Any, runner_of: Any, spec_name: str) -> Iterator[LiveMetrics]:
    """Serve ``metrics`` (``output.metrics``, or None: serve nothing) for the ``with`` block; a port that
    cannot be bound is a one-line ``UserError`` before anything runs."""
    if not metrics:
        yield LiveMetrics()
        return
    settings = metrics_settings(metrics)
    require_metrics(metrics)
    client = optional_module("prometheus_client", EXTRA, "output.metrics")
    registry = client.CollectorRegistry(auto_describe=False)
    collector = RunCollector(runner_of, spec_name)
    registry.register(collector)
    try:
        server, thread = client.start_http_server(settings["port"], addr=settings["host"], registry=registry)
    except OSError as error:
        raise _cannot_serve(settings, error) from None
    try:
        yield LiveMetrics(collector)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
