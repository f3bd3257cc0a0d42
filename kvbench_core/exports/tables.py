"""A result document as tidy tables: one row per observation, one column per variable, units in the names.

Pure Python over the result document (no pyarrow here): ``tabular`` writes these rows as Parquet or CSV, and a
test can check them against the document they came from.  Every row starts with ``result`` (the label the
caller gives, a file's stem) and ``run_id``, so tables of several results stack into one (docs/export.md
lists every column and its unit).  Latency histograms are the result's own mergeable DDSketch buckets
(``engine/measure/histogram``): bucket ``i`` holds the samples in (gamma^(i-1), gamma^i] seconds, written here as
``lower_ms``/``upper_ms`` so a reader needs no formula; the zero bucket is ``bucket`` null, 0 .. 1e-6 ms.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kvbench_core.results.document import ResultDocument

Row = dict[str, Any]
#: Tier operations and the latency layers each one's histograms hold (``metrics.tiers.<tier>.<op>``).
TIER_OPS = ("read", "write")
#: Request-level histograms (``metrics.histograms``) and, for the per-class ones, the class they split by.
REQUEST_HISTOGRAMS = ("end_to_end", "queue_wait", "storage")
CLASS_HISTOGRAMS = ("end_to_end_by_qos", "service_by_qos")
#: The per-class request latency columns (``metrics.qos.<class>.latency_ms`` / ``service_latency_ms``).
CLASS_STATS = ("count", "mean", "p50", "p95", "p99", "p99.9", "max")
#: Interval figures that are per-tier dicts: they go to ``tier_timeseries``, not into ``timeseries``'s columns.
_NESTED = ("tiers", "occupancy")


def _head(label: str, document: ResultDocument) -> Row:
    return {"result": label, "run_id": document.run.id}


def timeseries_rows(label: str, document: ResultDocument) -> Iterator[Row]:
    """One row per time-series interval: its scalar figures as the result names them, and each class's
    interval p95/p99 as ``<figure>_<class>`` (``e2e_p95_ms_batch``)."""
    for point in document.series:
        row = _head(label, document)
        for key, value in point.items():
            if key in _NESTED:
                continue
            if isinstance(value, dict):
                row.update({f"{key}_{qos}": figure for qos, figure in value.items()})
            else:
                row[key] = value
        yield row


def tier_timeseries_rows(label: str, document: ResultDocument) -> Iterator[Row]:
    """One row per interval and tier: the interval's bytes, bandwidth and p95 per op, and the tier's
    occupancy at the interval's end."""
    for point in document.series:
        tiers = point.get("tiers") or {}
        occupancy = point.get("occupancy") or {}
        for tier in dict.fromkeys([*tiers, *occupancy]):
            held = occupancy.get(tier) or {}
            yield {**_head(label, document), "t_s": point.get("t_s"), "interval_s": point.get("interval_s"),
                   "tier": tier, **(tiers.get(tier) or {}), "entries": held.get("entries"),
                   "stored_bytes": held.get("bytes"), "capacity_bytes": held.get("capacity_bytes")}


def _bucket_rows(histogram: Mapping[str, Any] | None) -> Iterator[Row]:
    """(bucket, lower_ms, upper_ms, count) of one serialised histogram, the zero bucket first."""
    if not histogram or not histogram.get("count"):
        return
    if histogram.get("zeros"):
        yield {"bucket": None, "lower_ms": 0.0, "upper_ms": 1e-6, "count": histogram["zeros"]}
    gamma = (1 + histogram["accuracy"]) / (1 - histogram["accuracy"])
    for index, count in sorted((int(i), n) for i, n in (histogram.get("buckets") or {}).items()):
        yield {"bucket": index, "lower_ms": 1000 * gamma ** (index - 1), "upper_ms": 1000 * gamma ** index,
               "count": count}


def histogram_rows(label: str, document: ResultDocument) -> Iterator[Row]:
    """One row per non-empty bucket of every latency histogram the result holds: each tier's operations by
    layer (``scope`` tier: total, host, device, codec, and command = one device command) and the
    requests' (``scope`` request: end_to_end, queue_wait, storage, and per class end_to_end / service)."""
    yield from _tier_histogram_rows(label, document)
    histograms = document.histograms
    for name in REQUEST_HISTOGRAMS:
        for row in _bucket_rows(histograms.get(name)):
            yield {**_head(label, document), "scope": "request", "tier": None, "op": None, "layer": name,
                   "qos_class": None, **row}
    for name in CLASS_HISTOGRAMS:
        for qos, histogram in (histograms.get(name) or {}).items():
            for row in _bucket_rows(histogram):
                yield {**_head(label, document), "scope": "request", "tier": None, "op": None,
                       "layer": name.removesuffix("_by_qos"), "qos_class": qos, **row}


def _tier_histogram_rows(label: str, document: ResultDocument) -> Iterator[Row]:
    for tier, figures in document.tiers.items():
        for op in TIER_OPS:
            for layer, histogram in ((figures.get(op) or {}).get("histograms") or {}).items():
                for row in _bucket_rows(histogram):
                    yield {**_head(label, document), "scope": "tier", "tier": tier, "op": op, "layer": layer,
                           "qos_class": None, **row}


def class_rows(label: str, document: ResultDocument) -> Iterator[Row]:
    """One row per QoS class: requests, its targets, whether they were met, and the end-to-end
    (``e2e_*_ms``) and service (``service_*_ms``) latency figures the summary reports."""
    for qos, figures in document.class_figures.items():
        row = {**_head(label, document), "qos_class": qos, "requests": figures.get("requests"),
               "priority": figures.get("priority"), "sla_p95_ms": figures.get("sla_p95_ms"),
               "sla_p99_ms": figures.get("sla_p99_ms"), "sla_met": figures.get("sla_met")}
        for prefix, key in (("e2e", "latency_ms"), ("service", "service_latency_ms")):
            stats = figures.get(key) or {}
            for stat in CLASS_STATS:
                row[f"{prefix}_{stat.replace('.', '_')}" + ("" if stat == "count" else "_ms")] = stats.get(stat)
        yield row


#: table name -> the function that makes its rows from one result (``commands`` comes from the I/O log).
RESULT_TABLES = {"timeseries": timeseries_rows, "tier_timeseries": tier_timeseries_rows,
                 "latency_histograms": histogram_rows, "classes": class_rows}

