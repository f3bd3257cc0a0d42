"""PNG plots of a result (matplotlib, headless: figures are drawn with the Agg canvas, never pyplot).

* ``-throughput.png``: generated tokens/s per interval (the headline's definition, its value drawn as a
  line), and read/write GB/s of each tier;
* ``-latency-cdf.png``: a log tail view (fraction of operations slower than x, down to 1 in 1000):
  first each QoS class's request service latency with its p95 and SLA marked, then per tier and
  operation the total, host and device time, p95 marked; read back from the result's serialised
  histograms (so a merged multi-client result plots the merged distribution);
* ``-occupancy.png``: each tier's bytes as a share of its capacity over time;
* ``-autoscaler.png``: users over time as each autoscaler decided;
* ``-capacity.png``: the curve a judged search measured (reports/capacity.py), SLA lines drawn;
* ``-trials.png`` (trials summaries): every trial's value and the median.

The drain (in-flight work finishing after the measured duration) is shaded, never drawn as one flat
step.  A plot whose data the result does not have is skipped, not drawn empty.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.reports import autoscaler_trajectories, require
from kvbench_core.reports.key_figures import HEADLINE
from kvbench_core.results.document import ResultDocument

GB = 1e9
LAYERS = (("total", "black", "-"), ("host", "tab:blue", "--"), ("device", "tab:orange", "-"))
DPI = 110
#: The tail view goes down to one operation in this many (p99.9).
TAIL_DEPTH = 1000
DRAIN_COLOR = "0.85"


def _figure(rows: int, cols: int, height_per_row: float = 3.0, width: float = 10.0) -> Any:
    """A figure with fixed margins: a layout engine re-measures every tick label and costs seconds per plot."""
    require("matplotlib", "png output")
    from matplotlib.figure import Figure

    height = max(2.5, height_per_row * rows) + 0.6
    figure = Figure(figsize=(width, height), dpi=DPI)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.5 / height + 0.04, top=1 - 0.6 / height,
                           hspace=0.6, wspace=0.22)
    return figure


def _save(figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def png_bytes(figure: Any) -> bytes:
    """The figure as PNG bytes (the HTML report embeds them as data URIs)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


#: Every plot kvbench can draw, in order: ``<stem>-<name>.png`` (so a caller knows the files before drawing).
PLOT_NAMES = ("throughput", "latency-cdf", "occupancy", "autoscaler", "capacity", "trials")


def plot_paths(directory: Path, stem: str) -> list[Path]:
    """Every file ``plot_result`` may write for ``stem`` in ``directory``."""
    return [Path(directory) / f"{stem}-{name}.png" for name in PLOT_NAMES]


def figures(document: ResultDocument) -> Iterator[tuple[str, Any]]:
    """(plot name, figure) for every plot the result has data for."""
    from kvbench_core.reports.capacity import curve_figure  # it draws with this module's figure

    drawers: dict[str, Callable[[ResultDocument], Any]] = {
        "throughput": _throughput, "latency-cdf": _latency_cdf, "occupancy": _occupancy,
        "autoscaler": _autoscaler, "capacity": curve_figure, "trials": _trials}
    for name in PLOT_NAMES:
        figure = drawers[name](document)
        if figure is not None:
            yield name, figure


def plot_result(document: ResultDocument, directory: Path, stem: str) -> list[Path]:
    """Every plot the result has data for, as ``<directory>/<stem>-<plot>.png``."""
    return [_save(figure, Path(directory) / f"{stem}-{name}.png") for name, figure in figures(document)]


def _title(document: ResultDocument, what: str) -> str:
    scale = document.scale_out
    merged = f" ({scale['clients']} {scale['label']}s merged)" if scale else ""
    return f"{document.run.name or 'run'} {document.run.id}: {what}{merged}"


def measured_points(document: ResultDocument) -> tuple[list[Mapping[str, Any]], tuple[float, float] | None]:
    """The series' measured intervals, and the drain's span (start, end in seconds) when there is one.

    Newer results keep the drain out of the series (its own ``metrics.drain`` section); older ones end
    the series with one long point covering it, recognised by an interval far longer than the others."""
    series = list(document.series)
    drain_s = (document.metrics.get("drain") or {}).get("seconds")
    if len(series) >= 3:
        nominal = float(np.median([p["interval_s"] for p in series[:-1]]))
        if series[-1]["interval_s"] > 1.5 * nominal:
            last = series.pop()
            return series, (last["t_s"] - last["interval_s"] + nominal, last["t_s"])
    if drain_s and series:
        end = series[-1]["t_s"]
        return series, (end, end + drain_s)
    return series, None


def _shade_drain(axes: Any, drain: tuple[float, float] | None) -> None:
    if drain is not None:
        axes.axvspan(*drain, color=DRAIN_COLOR, zorder=0, label="drain (after the measured window)")


def generated_tokens_per_s(point: dict[str, Any]) -> tuple[float, str] | None:
    """The point's generated tokens/s (the headline's definition), or what an older result has instead."""
    if "generated_tokens_per_s" in point:
        return point["generated_tokens_per_s"], "generated tokens/s"
    if "tokens_per_s" in point:
        return point["tokens_per_s"], "context + generated tokens/s (older result)"
    return None


def _throughput(document: ResultDocument) -> Any:
    series, drain = measured_points(document)
    if not series:
        return None
    t = _interval_edges(series)
    figure = _figure(2, 1, height_per_row=3.2)
    tokens, bandwidth = figure.subplots(2, 1, sharex=True)
    rates = [generated_tokens_per_s(p) for p in series]
    if all(rates):
        tokens.step(t, _held([r[0] for r in rates]), where="post", color="tab:green", label="per interval")
        tokens.set_ylabel(rates[0][1].split(" (")[0])
        headline = document.headline.get("avg_throughput_tokens_per_sec")
        if headline is not None and rates[0][1] == "generated tokens/s":
            tokens.axhline(headline, color="tab:green", linestyle=":", label=f"run average {headline:,.0f}")
        tokens.legend(loc="upper right", fontsize="small")
    tokens.set_title(_title(document, "generated tokens/s and each tier's bandwidth per interval"))
    per_tier = _tier_rates(series)
    colors = _tier_colors(list(per_tier))
    for name, (reads, writes) in per_tier.items():
        bandwidth.step(t, _held(np.array(reads) / GB), where="post", color=colors[name], label=f"{name} read")
        bandwidth.step(t, _held(np.array(writes) / GB), where="post", color=colors[name], linestyle="--",
                       label=f"{name} write")
    bandwidth.set_ylabel("GB/s")
    bandwidth.set_xlabel("seconds since measurement start")
    for axes in (tokens, bandwidth):
        _shade_drain(axes, drain)
        axes.grid(alpha=0.3)
        top = axes.get_ylim()[1]
        axes.set_ylim(0, top * 1.3 if top > 0 else 1)  # headroom: the legend sits above the data
    bandwidth.legend(loc="upper right", fontsize="small", ncol=3)
    return figure


def _interval_edges(series: list[dict[str, Any]]) -> list[float]:
    """Each interval's start and the last one's end: a step per interval over the time it covers."""
    return [p["t_s"] - p["interval_s"] for p in series] + [series[-1]["t_s"]]


def _held(values: Any) -> list[float]:
    """The values with the last repeated, so the last interval's step reaches its end."""
    values = list(values)
    return values + values[-1:]


def _tier_rates(series: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """tier -> (read bytes/s, write bytes/s) per point; all tiers summed as "all tiers" in older results."""
    names = list(dict.fromkeys(name for p in series for name in (p.get("tiers") or {})))
    if not names:
        return {"all tiers": ([p.get("read_bytes_per_s", 0.0) for p in series],
                              [p.get("write_bytes_per_s", 0.0) for p in series])}
    order = list(dict.fromkeys(name for p in series for name in (p.get("occupancy") or {})))
    names.sort(key=lambda n: order.index(n) if n in order else len(order))
    return {name: (_tier_rate(series, name, "read"), _tier_rate(series, name, "write")) for name in names}


def _tier_rate(series: list[dict[str, Any]], name: str, op: str) -> list[float]:
    """One tier's bytes/s of ``op`` per point (0 where a point does not name the tier)."""
    return [((p.get("tiers") or {}).get(name) or {}).get(f"{op}_bytes_per_s", 0.0) for p in series]


def _tier_colors(names: list[str]) -> dict[str, str]:
    palette = ("tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:cyan", "tab:olive")
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def tail_points(histogram: dict[str, Any], points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(latency ms, fraction of operations slower), exceedance from 1 down to 1/TAIL_DEPTH, via the
    histogram's own quantile function, ending at (max, 1/n): the slowest operation is the tail's last step,
    on the plot however few operations there were (with more than TAIL_DEPTH it is the drop below the axis)."""
    hist = LatencyHistogram.from_dict(histogram)
    if not hist.count:
        return np.empty(0), np.empty(0)
    last = 1.0 / hist.count
    slower = np.logspace(0.0, np.log10(1.0 / TAIL_DEPTH), points)
    slower = slower[slower > last]
    values = np.array([hist.quantile(1.0 - s) for s in slower], dtype=float) * 1000.0
    return np.append(values, hist.max * 1000.0), np.append(slower, last)


def _tail_axes(axes: Any, title: str) -> None:
    from matplotlib.ticker import FixedLocator, NullFormatter

    axes.set_title(title, fontsize="medium")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_ylim(1.0 / TAIL_DEPTH / 1.5, 1.05)
    axes.yaxis.set_major_locator(FixedLocator([1.0, 0.1, 0.05, 0.01, 0.001]))
    axes.set_yticklabels(["all", "p90", "p95", "p99", "p99.9"])
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel("latency (ms, log)")
    axes.set_ylabel("slower than x")
    axes.grid(alpha=0.3, which="major")


def _tail_step(axes: Any, histogram: dict[str, Any], **style: Any) -> list[float]:
    """Draw one histogram's tail (its positive latencies; a log axis has no zero), with a dot on its last
    point, the slowest operation, which a lone step could not show; returns the latency range drawn."""
    values, slower = tail_points(histogram)
    positive = values > 0
    if not positive.any():
        return []
    values, slower = values[positive], slower[positive]
    line = axes.step(values, slower, where="post", **style)[0]
    axes.plot(values[-1:], slower[-1:], "o", color=line.get_color(), markersize=3)
    return [float(values.min()), float(values.max())]


def _p95_marker(axes: Any, histogram: dict[str, Any], color: str, nth: int = 0) -> None:
    """A dot at the p95 and its value, on the curve; the ``nth`` label of an axes sits lower, so labels do
    not overlap.  Under 20 operations the p95 is the slowest (nearest rank), where the curve ends at 1/n."""
    hist = LatencyHistogram.from_dict(histogram)
    p95 = hist.quantile(0.95) * 1000.0
    if p95 > 0:
        at = max(0.05, 1.0 / hist.count)
        axes.plot([p95], [at], "o", color=color, markersize=5)
        axes.annotate(f"p95 {p95:,.1f} ms", (p95, at), textcoords="offset points", xytext=(-6, 4 - 11 * nth),
                      ha="right", fontsize="x-small", color=color)


def _decades_only(axes: Any, values: list[float]) -> None:
    """Several decades: label the decades only (readable, fast); within one, keep the minor labels."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")  # 200 and 0.01, not 2x10^2 and 10^-2
    axes.xaxis.set_major_formatter(plain)
    positive = [v for v in values if v > 0]
    axes.xaxis.set_minor_formatter(NullFormatter() if positive and max(positive) > 10 * min(positive) else plain)


def _latency_cdf(document: ResultDocument) -> Any:
    tiers = document.tiers
    if not tiers:
        return None
    service = {q: h for q, h in (document.histograms.get("service_by_qos") or {}).items() if h.get("count")}
    rows = len(tiers) + (1 if service else 0)
    figure = _figure(rows, 2, height_per_row=3.2)
    grid = np.atleast_2d(figure.subplots(rows, 2, squeeze=False))
    if service:
        _service_tail(grid[0][0], service, document.class_figures)
        _service_table(grid[0][1], service, document.class_figures)
    for row, (name, tier) in zip(grid[1 if service else 0:], tiers.items(), strict=True):
        for axes, op in zip(row, ("read", "write"), strict=True):
            _op_tail(axes, f"{name} {op} per KV entry ({tier[op]['ops']} ops)", tier[op]["histograms"])
    figure.suptitle(_title(document, "latency tail view (requests vs SLA, then tier operations)"))
    return figure


def _op_tail(axes: Any, title: str, hists: dict[str, Any]) -> None:
    """One tier op's tail per latency layer, its total's p95 marked ("no operations" when it had none)."""
    _tail_axes(axes, title)
    if not hists["total"]["count"]:
        axes.text(0.5, 0.5, "no operations", ha="center", va="center", transform=axes.transAxes)
        return
    shown: list[float] = []
    for layer, color, style in LAYERS:
        shown += _tail_step(axes, hists[layer], color=color, linestyle=style, label=layer)
    _decades_only(axes, shown)
    _p95_marker(axes, hists["total"], "black")
    axes.legend(loc="lower left", fontsize="x-small")


def _service_tail(axes: Any, service: dict[str, dict[str, Any]], qos: Mapping[str, Any]) -> None:
    _tail_axes(axes, "request service latency per QoS class (SLA dashed)")
    colors = {"interactive": "tab:red", "responsive": "tab:purple", "batch": "tab:green"}
    shown: list[float] = []
    for nth, (name, histogram) in enumerate(service.items()):
        color = colors.get(name, "tab:gray")
        shown += _tail_step(axes, histogram, color=color, label=name)
        _p95_marker(axes, histogram, color, nth)
        sla = (qos.get(name) or {}).get("sla_p95_ms")
        if sla:
            axes.axvline(sla, color=color, linestyle="--", linewidth=1)
            shown.append(sla)
    _decades_only(axes, shown)
    axes.legend(loc="lower left", fontsize="x-small")


def _service_table(axes: Any, service: dict[str, dict[str, Any]], qos: Mapping[str, Any]) -> None:
    """The verdicts beside the tail they come from: p95 against the SLA, per class."""
    axes.axis("off")
    rows = []
    for name in service:
        info = qos.get(name) or {}
        p95 = (info.get("service_latency_ms") or {}).get("p95")
        verdict = {True: "met", False: "MISSED"}.get(info.get("sla_met"), "-")
        rows.append([name, "-" if p95 is None else f"{p95:,.1f}", f"{info.get('sla_p95_ms', '-')}", verdict])
    table = axes.table(cellText=rows, colLabels=["class", "service p95 ms", "SLA p95 ms", "verdict"],
                       loc="center", cellLoc="right")
    table.scale(1, 1.4)
    axes.set_title("QoS verdicts (service latency: queue wait + storage)", fontsize="medium")


def _occupancy(document: ResultDocument) -> Any:
    measured, drain = measured_points(document)
    series = [p for p in measured if p.get("occupancy")]
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
            capacity = entry.get("capacity_bytes")
            shares.append(100.0 * entry.get("bytes", 0) / capacity if capacity else np.nan)
        axes.plot(t, shares, label=tier)
    _shade_drain(axes, drain)
    axes.set_ylabel("% of capacity")
    axes.set_xlabel("seconds since measurement start")
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    axes.set_title(_title(document, "tier occupancy"))
    return figure


def _autoscaler(document: ResultDocument) -> Any:
    trajectories = autoscaler_trajectories(document)
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
    axes.set_title(_title(document, "autoscaler trajectory"))
    return figure


def _trials(document: ResultDocument) -> Any:
    if document.trials is None:
        return None
    statistics = document.trials.metrics
    stats = [(f, statistics[f.key]) for f in HEADLINE
             if f.key in statistics and statistics[f.key]["median"] is not None]
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
    figure.suptitle(_title(document, "trials (completed) and their median"))
    return figure
