"""PNG plots of a result (matplotlib, headless: figures are drawn with the Agg canvas, never pyplot).

* ``-throughput.png``: tokens/s and read/write GB/s per interval;
* ``-latency-cdf.png``: per tier and operation, the CDF of total, host and
  device time, read back from the result's serialised histograms (so a merged
  multi-client result plots the merged distribution);
* ``-occupancy.png``: each tier's bytes as a share of its capacity over time;
* ``-autoscaler.png``: users over time as each autoscaler decided;
* ``-trials.png`` (trials summaries): every trial's value and the median.

A plot whose data the result does not have is skipped, not drawn empty.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvbench_core.engine.histogram import LatencyHistogram
from kvbench_core.reports import autoscaler_trajectories, require
from kvbench_core.reports.metrics import HEADLINE

GB = 1e9
LAYERS = (("total", "black", "-"), ("host", "tab:blue", "--"), ("device", "tab:orange", "-"))
DPI = 110


def _figure(rows: int, cols: int, height_per_row: float = 3.0, width: float = 10.0) -> Any:
    """A figure with fixed margins: a layout engine re-measures every tick label and costs seconds per plot."""
    require("matplotlib", "png output")
    from matplotlib.figure import Figure

    height = max(2.5, height_per_row * rows) + 0.6
    figure = Figure(figsize=(width, height), dpi=DPI)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.5 / height + 0.04, top=1 - 0.6 / height,
                           hspace=0.55, wspace=0.22)
    return figure


def _save(figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def plot_result(result: dict[str, Any], directory: Path, stem: str) -> list[Path]:
    """Every plot the result has data for, as ``<directory>/<stem>-<plot>.png``."""
    plots: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("throughput", _throughput), ("latency-cdf", _latency_cdf), ("occupancy", _occupancy),
        ("autoscaler", _autoscaler), ("trials", _trials)]
    written = []
    for name, draw in plots:
        figure = draw(result)
        if figure is not None:
            written.append(_save(figure, Path(directory) / f"{stem}-{name}.png"))
    return written


def _title(result: dict[str, Any], what: str) -> str:
    run = result["run"]
    scale = result.get("scale_out")
    merged = f" ({scale['clients']} {scale['label']}s merged)" if scale else ""
    return f"{run['name'] or 'run'} {run['id']}: {what}{merged}"


def _throughput(result: dict[str, Any]) -> Any:
    series = result.get("timeseries") or []
    if not series:
        return None
    t = [p["t_s"] for p in series]
    figure = _figure(2, 1)
    tokens, bandwidth = figure.subplots(2, 1, sharex=True)
    tokens.plot(t, [p["tokens_per_s"] for p in series], color="tab:green", drawstyle="steps-pre")
    tokens.set_ylabel("tokens/s")
    tokens.set_title(_title(result, "throughput and bandwidth per interval"))
    bandwidth.plot(t, [p["read_bytes_per_s"] / GB for p in series], label="read", drawstyle="steps-pre")
    bandwidth.plot(t, [p["write_bytes_per_s"] / GB for p in series], label="write", drawstyle="steps-pre")
    bandwidth.set_ylabel("GB/s")
    bandwidth.set_xlabel("seconds since measurement start")
    bandwidth.legend(loc="upper right")
    for axes in (tokens, bandwidth):
        axes.grid(alpha=0.3)
        axes.set_ylim(bottom=0)
    return figure


def cdf_points(histogram: dict[str, Any], points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(latency ms, cumulative fraction) of a serialised histogram, via its own quantile function."""
    hist = LatencyHistogram.from_dict(histogram)
    fractions = np.linspace(0.0, 1.0, points)
    values = np.array([hist.quantile(q) for q in fractions], dtype=float) * 1000.0
    return values, fractions


def _latency_cdf(result: dict[str, Any]) -> Any:
    tiers = (result.get("metrics") or {}).get("tiers") or {}
    if not tiers:
        return None
    from matplotlib.ticker import NullFormatter

    figure = _figure(len(tiers), 2, height_per_row=3.2)
    grid = np.atleast_2d(figure.subplots(len(tiers), 2, squeeze=False))
    for row, (name, tier) in zip(grid, tiers.items(), strict=True):
        for axes, op in zip(row, ("read", "write"), strict=True):
            hists = tier[op]["histograms"]
            axes.set_title(f"{name} {op} ({tier[op]['ops']} ops)")
            axes.grid(alpha=0.3)
            if not hists["total"]["count"]:
                axes.text(0.5, 0.5, "no operations", ha="center", va="center", transform=axes.transAxes)
                continue
            shown: list[float] = []
            for layer, color, style in LAYERS:
                values, fractions = cdf_points(hists[layer])
                positive = values > 0
                if positive.any():
                    axes.step(values[positive], fractions[positive], where="post", color=color, linestyle=style,
                              label=layer)
                    shown += [values[positive].min(), values[positive].max()]
            axes.set_xscale("log")
            if shown and max(shown) > 30 * min(shown):  # several decades: label decades only (readable, fast)
                axes.xaxis.set_minor_formatter(NullFormatter())
            axes.set_xlabel("latency (ms, log)")
            axes.set_ylabel("fraction of ops")
            axes.set_ylim(0, 1.02)
            axes.legend(loc="lower right", fontsize="small")
    figure.suptitle(_title(result, "latency CDF per tier: total, host and device"))
    return figure


def _occupancy(result: dict[str, Any]) -> Any:
    series = [p for p in result.get("timeseries") or [] if p.get("occupancy")]
    if not series:
        return None
    tiers = list(dict.fromkeys(t for p in series for t in p["occupancy"]))
    figure = _figure(1, 1, height_per_row=3.5)
    axes = figure.subplots()
    t = [p["t_s"] for p in series]
    for tier in tiers:
        shares = []
        for point in series:
            entry = point["occupancy"].get(tier) or {}
            capacity = entry.get("capacity")
            shares.append(100.0 * entry.get("bytes", 0) / capacity if capacity else np.nan)
        axes.plot(t, shares, label=tier)
    axes.set_ylabel("% of capacity")
    axes.set_xlabel("seconds since measurement start")
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    axes.set_title(_title(result, "tier occupancy"))
    return figure


def _autoscaler(result: dict[str, Any]) -> Any:
    trajectories = autoscaler_trajectories(result)
    if not trajectories:
        return None
    figure = _figure(1, 1, height_per_row=3.5)
    axes = figure.subplots()
    for label, steps in trajectories:
        t = [0.0] + [s["t_s"] for s in steps]
        users = [steps[0]["users_before"]] + [s["users"] for s in steps]
        axes.step(t, users, where="post", label=label, marker="o", markersize=3)
    axes.set_xlabel("seconds since measurement start")
    axes.set_ylabel("users")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")
    axes.set_title(_title(result, "autoscaler trajectory"))
    return figure


def _trials(result: dict[str, Any]) -> Any:
    trials = result.get("trials")
    if not trials:
        return None
    stats = [(f, trials["metrics"][f.key]) for f in HEADLINE
             if f.key in trials["metrics"] and trials["metrics"][f.key]["median"] is not None]
    if not stats:
        return None
    from matplotlib.ticker import MaxNLocator

    cols = 2
    rows = -(-len(stats) // cols)
    figure = _figure(rows, cols, height_per_row=2.4)
    grid = figure.subplots(rows, cols, squeeze=False).ravel()
    for axes, (figure_def, stat) in zip(grid, stats, strict=False):
        values = stat["values"]
        trial_numbers = [i + 1 for i, v in enumerate(values) if v is not None]
        axes.plot(trial_numbers, [v for v in values if v is not None], "o", color="tab:blue")
        axes.axhline(stat["median"], color="tab:red", label="median")
        cv = "" if stat["cv"] is None else f", CV {stat['cv']:.0%}"
        axes.set_title(f"{figure_def.label}{cv}", fontsize="medium")
        axes.set_ylabel(figure_def.unit)
        axes.set_xlabel("completed trial")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
    for axes in grid[len(stats):]:
        axes.set_visible(False)
    figure.suptitle(_title(result, "trials (completed) and their median"))
    return figure
