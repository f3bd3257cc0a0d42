"""The curves of several results overlaid, one colour per result (``kvbench compare --html``).

Three figures: each tier operation's latency tail (the same tail view as one result's report, every
result's curve on one axes per tier and op), each tier's read and write bandwidth over the measured
window, and each QoS class's service p95 beside its SLA.  Curves come from the results' own histograms
and time series, drawn by the single-result plots' helpers, so a curve here is the same curve as in each
result's report.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from kvbench_core.reports.plots import (
    _decades_only,
    _figure,
    _held,
    _interval_edges,
    _tail_axes,
    _tail_step,
    _tier_rates,
    measured_points,
)
from kvbench_core.results.document import ResultDocument

RESULT_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
                 "tab:gray", "tab:olive", "tab:cyan")
GB = 1e9


def _colors(labels: list[str]) -> dict[str, str]:
    return {label: RESULT_COLORS[i % len(RESULT_COLORS)] for i, label in enumerate(labels)}


Labelled = list[tuple[str, ResultDocument]]


def _tier_ops(results: Labelled) -> list[tuple[str, str]]:
    names = dict.fromkeys(name for _, r in results for name in r.tiers)
    return [(name, op) for name in names for op in ("read", "write")]


def latency_tails(results: Labelled) -> Any:
    """One axes per tier and op, each result's total-latency tail on it."""
    pairs = _tier_ops(results)
    if not pairs:
        return None
    colors = _colors([label for label, _ in results])
    rows = (len(pairs) + 1) // 2
    figure = _figure(rows, 2, height_per_row=3.2)
    grid = np.atleast_2d(figure.subplots(rows, 2, squeeze=False)).ravel()
    for axes, (tier, op) in zip(grid, pairs, strict=False):
        _tail_axes(axes, f"{tier} {op} per KV entry")
        shown: list[float] = []
        for label, result in results:
            figures = (result.tiers.get(tier) or {}).get(op) or {}
            histogram = (figures.get("histograms") or {}).get("total")
            if histogram and histogram.get("count"):
                shown += _tail_step(axes, histogram, color=colors[label], label=f"{label} ({figures['ops']} ops)")
        _decades_only(axes, shown)
        if shown:
            axes.legend(loc="lower left", fontsize="x-small")
        else:
            axes.text(0.5, 0.5, "no operations", ha="center", va="center", transform=axes.transAxes)
    for axes in grid[len(pairs):]:
        axes.axis("off")
    figure.suptitle("latency tail per tier operation (total: host + device), one curve per result")
    return figure


def bandwidth(results: Labelled) -> Any:
    """One row per tier, read and write GB/s over the measured window, one step line per result."""
    rates = {label: (measured_points(result)[0], _tier_rates(measured_points(result)[0]))
             for label, result in results if measured_points(result)[0]}
    tiers = list(dict.fromkeys(name for _, per_tier in rates.values() for name in per_tier))
    if not tiers:
        return None
    colors = _colors([label for label, _ in results])
    figure = _figure(len(tiers), 2, height_per_row=2.8)
    grid = np.atleast_2d(figure.subplots(len(tiers), 2, squeeze=False))
    for row, tier in zip(grid, tiers, strict=True):
        for axes, op, index in ((row[0], "read", 0), (row[1], "write", 1)):
            for label, (series, per_tier) in rates.items():
                if tier in per_tier:
                    axes.step(_interval_edges(series), _held(np.array(per_tier[tier][index]) / GB), where="post",
                              color=colors[label], label=label)
            axes.set_title(f"{tier} {op}", fontsize="medium")
            axes.set_xlabel("s since the measured window opened")
            axes.set_ylabel("GB/s")
            axes.grid(alpha=0.3)
            axes.legend(loc="upper right", fontsize="x-small")
    figure.suptitle("per-tier bandwidth over time (device bytes per interval), one line per result")
    return figure


def _class_figure(document: ResultDocument, name: str) -> Mapping[str, Any]:
    """One class's figures in a result; empty when that result did not run the class."""
    return document.class_figures.get(name) or {}


def _class_p95(result: ResultDocument, name: str) -> float:
    """A class's service p95 in a result, 0 where the result has none (a bar of nothing, not a gap)."""
    return (_class_figure(result, name).get("service_latency_ms") or {}).get("p95") or 0.0


def class_p95(results: Labelled) -> Any:
    """Each QoS class's service p95 per result as grouped bars, the class's SLA p95 as a dashed line."""
    classes = list(dict.fromkeys(qos for _, r in results for qos, figures in r.class_figures.items()
                                 if figures.get("requests")))
    if not classes:
        return None
    colors = _colors([label for label, _ in results])
    figure = _figure(1, 1, height_per_row=3.6)
    axes = figure.subplots()
    width = 0.8 / len(results)
    for nth, (label, result) in enumerate(results):
        values = [_class_p95(result, name) for name in classes]
        axes.bar(np.arange(len(classes)) + (nth - (len(results) - 1) / 2) * width, values, width,
                 color=colors[label], label=label)
    for index, name in enumerate(classes):
        # The first result's SLA for the class is the one drawn.
        sla = next(_class_figure(r, name).get("sla_p95_ms") for _, r in results)
        if sla:
            axes.hlines(sla, index - 0.45, index + 0.45, colors="black", linestyles="--", linewidth=1)
    axes.set_xticks(np.arange(len(classes)), classes)
    axes.set_ylabel("service p95 (ms)")
    axes.set_yscale("log")
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize="x-small")
    axes.set_title("service latency p95 per QoS class (queue wait + storage); dashed: the class's SLA p95",
                   fontsize="medium")
    return figure


def compare_figures(results: Labelled) -> Iterator[tuple[str, Any]]:
    """(name, figure) of each overlay the results have data for."""
    for name, draw in (("latency-tails", latency_tails), ("bandwidth", bandwidth), ("class-p95", class_p95)):
        figure = draw(results)
        if figure is not None:
            yield name, figure
