"""The capacity curve a judged search measured, in every report: the answer line, the step table, the plot.

A result whose autoscaler judged steps (``qos``, ``sla_search``: kvbench_core/capacity) carries them in
``autoscaling.summary``: the answer (``max_users_within_sla``, ``ci95``, ``at_least``, ``limited_by``) and
``steps``, one per judged load with its per-class service p95/p99 from the step's merged histograms,
throughput, per-tier bandwidth and device share.  The summary, ``kvbench capacity``, the HTML report,
the workbook and ``-capacity.png`` all read them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench_core.capacity.interval import KEYS, Answer
from kvbench_core.results.document import ResultDocument

GB = 1e9
MB = 1e6


def capacity_of(document: ResultDocument) -> Mapping[str, Any] | None:
    """The judged search's summary, or None when the run's autoscaler judged no steps."""
    summary = document.autoscaler_summary
    return summary if isinstance(summary.get("steps"), list) and any(key in summary for key in KEYS.values()) \
        else None


def load_label(document: ResultDocument) -> str:
    """What a step's load is: users, or an open loop's arrival rate in percent of the spec's."""
    return "users" if (capacity_of(document) or {}).get("load_kind", "users") == "users" else "% of arrival rate"


def answer_line(document: ResultDocument) -> str | None:
    """``max users within SLA: 48 (95 % CI 44-52), limited by responsive: ...`` (and whether it finished)."""
    summary = capacity_of(document)
    if summary is None:
        return None
    line = Answer.from_dict(summary).line(summary.get("load_kind") or "users")
    if summary.get("search_finished") is False:
        line += f" [search not finished in the budget: {summary.get('bracket')}]"
    return line


def classes_of(steps: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(name for step in steps for name in step.get("classes") or {}))


def tiers_of(steps: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(name for step in steps for name in step.get("tiers") or {}))


def curve_table(document: ResultDocument) -> tuple[list[str], list[list[Any]]]:
    """Headers and one row per judged step, in the order judged: the curve load -> p95, throughput, bandwidth."""
    steps = (capacity_of(document) or {}).get("steps") or []
    classes, tiers = classes_of(steps), tiers_of(steps)
    headers = [load_label(document), "verdict", "requests", "seconds",
               *(f"{q} p95 ms / SLA" for q in classes), "tok/s",
               *(f"{t} {what}" for t in tiers for what in ("read GB/s", "write GB/s", "device share"))]
    rows = []
    for step in steps:
        figures = step.get("classes") or {}
        rows.append([step["load"], step["verdict"], step["requests"], step["duration_s"],
                     *(_p95_of(figures.get(q)) for q in classes), step["generated_tokens_per_s"],
                     *(value for t in tiers for value in _tier_cells((step.get("tiers") or {}).get(t)))])
    return headers, rows


def _p95_of(figures: dict[str, Any] | None) -> str:
    if not figures:
        return "-"
    return f"{figures['service_p95_ms']:,.1f} / {figures['sla_p95_ms']:,.0f}"


def _tier_cells(row: dict[str, Any] | None) -> list[Any]:
    if not row:
        return ["-", "-", "-"]
    return [round(row["read_bytes_per_s"] / GB, 3), round(row["write_bytes_per_s"] / GB, 3),
            f"{row['device_share']:.0%}"]


def curve_lines(document: ResultDocument) -> list[str]:
    """The step table as text, columns aligned (the terminal's and the HTML report's)."""
    headers, rows = curve_table(document)
    if not rows:
        return []
    cells = [headers, *([_text(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in cells]


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)


def _steps_by_load(document: ResultDocument) -> list[dict[str, Any]]:
    """The judged steps in order of load: a curve is drawn left to right whatever order the search judged them."""
    return sorted((capacity_of(document) or {}).get("steps") or [], key=lambda s: s["load"])


def curve_figure(document: ResultDocument) -> Any:
    """``-capacity.png``: per class service p95 against users with its SLA as a dashed line (log scale), and
    throughput and each tier's bandwidth against users; None when the result judged no steps."""
    steps = _steps_by_load(document)
    if not steps:
        return None
    from kvbench_core.reports.plots import _figure, _title

    figure = _figure(2, 1, height_per_row=3.2)
    figure.subplots_adjust(right=0.9)  # room for the bandwidth axis on the right
    latency, rates = figure.subplots(2, 1)
    _draw_latency(latency, document, steps)
    latency.set_title(_title(document, "capacity curve"))
    _draw_rates(rates, document, steps)
    return figure


def _draw_latency(latency: Any, document: ResultDocument, steps: list[dict[str, Any]]) -> None:
    """The upper panel: each class's service p95 per step, its SLA dashed, the load found as a dotted line."""
    for index, name in enumerate(classes_of(steps)):
        color = f"C{index}"
        points = [(s["load"], s["classes"][name]) for s in steps if name in (s.get("classes") or {})]
        latency.plot([load for load, _ in points], [f["service_p95_ms"] for _, f in points], "o-", color=color,
                     label=f"{name} p95")
        latency.axhline(points[0][1]["sla_p95_ms"], color=color, linestyle="--", linewidth=1,
                        label=f"{name} SLA {points[0][1]['sla_p95_ms']:,.0f} ms")
    found = capacity_of(document) or {}
    best = found.get(KEYS[found.get("load_kind") or "users"])
    if best is not None:
        latency.axvline(best, color="0.4", linestyle=":", label=f"max {load_label(document)} within SLA")
    latency.set_yscale("log")
    latency.set_xlabel(load_label(document))
    latency.set_ylabel("service p95 (ms)")
    latency.grid(alpha=0.3)
    latency.legend(loc="upper left", fontsize="small")


def _draw_rates(rates: Any, document: ResultDocument, steps: list[dict[str, Any]]) -> None:
    """The lower panel: generated tokens/s per step, each tier's read and write MB/s on a second axis, one
    legend for both axes."""
    loads = [s["load"] for s in steps]
    rates.plot(loads, [s["generated_tokens_per_s"] for s in steps], "o-", color="black", label="generated tok/s")
    rates.set_ylabel("tokens/s")
    rates.set_xlabel(load_label(document))
    rates.grid(alpha=0.3)
    bandwidth = rates.twinx()
    for index, tier in enumerate(tiers_of(steps)):
        for op, style in (("read", "-"), ("write", "--")):
            bandwidth.plot(loads, [((s.get("tiers") or {}).get(tier) or {}).get(f"{op}_bytes_per_s", 0) / MB
                                   for s in steps], style, color=f"C{index + 2}", label=f"{tier} {op} MB/s")
    bandwidth.set_ylabel("MB/s")
    handles = rates.get_legend_handles_labels()
    extra = bandwidth.get_legend_handles_labels()
    rates.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left", fontsize="small")


def curve_numbers(document: ResultDocument) -> tuple[list[str], list[list[Any]]]:
    """The curve as numbers, one row per step in order of load: what the workbook's table and chart plot."""
    steps = _steps_by_load(document)
    classes, tiers = classes_of(steps), tiers_of(steps)
    headers = [load_label(document), "verdict", "requests", "seconds", "requests/s",
               *(f"{q} {what}" for q in classes for what in ("service p95 (ms)", "SLA p95 (ms)")), "tok/s",
               *(f"{t} {what}" for t in tiers for what in ("read GB/s", "write GB/s", "device share"))]
    rows = []
    for step in steps:
        figures, rates = step.get("classes") or {}, step.get("tiers") or {}
        rows.append([step["load"], step["verdict"], step["requests"], step["duration_s"], step["requests_per_s"],
                     *(value for q in classes for value in _class_numbers(figures.get(q))),
                     step["generated_tokens_per_s"],
                     *(value for t in tiers for value in _tier_numbers(rates.get(t)))])
    return headers, rows


def _class_numbers(figures: dict[str, Any] | None) -> tuple[Any, Any]:
    """A class's service p95 and SLA p95 at one step; empty cells where the step did not run the class."""
    if figures is None:
        return None, None
    return figures["service_p95_ms"], figures["sla_p95_ms"]


def _tier_numbers(row: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    """A tier's read and write GB/s and device share at one step; empty cells where the step did not touch it."""
    if row is None:
        return None, None, None
    return row["read_bytes_per_s"] / GB, row["write_bytes_per_s"] / GB, row["device_share"]


def capacity_sheet(book: Any, document: ResultDocument) -> None:
    """The workbook's ``Capacity`` sheet (reports/xlsx.py's book): the answer, the curve, and a chart of each
    class's service p95 against users with its SLA as a dashed line."""
    headers, rows = curve_numbers(document)
    if not rows:
        return
    sheet = book.table("Capacity", headers, rows, title=answer_line(document))
    top, last = sheet.kvbench_top, sheet.kvbench_top + len(rows)
    chart = book.workbook.add_chart({"type": "scatter", "subtype": "straight_with_markers"})
    for column, name in enumerate(headers):
        if name.endswith("(ms)"):
            dashed = {"line": {"dash_type": "dash"}, "marker": {"type": "none"}} if "SLA" in name else {}
            chart.add_series({"name": name, "categories": ["Capacity", top + 1, 0, last, 0],
                              "values": ["Capacity", top + 1, column, last, column], **dashed})
    chart.set_title({"name": f"service p95 and SLA against {load_label(document)}", "name_font": {"size": 11}})
    chart.set_x_axis({"name": load_label(document)})
    chart.set_y_axis({"name": "ms", "log_base": 10})
    chart.set_size({"width": 620, "height": 320})
    sheet.insert_chart(top + len(rows) + 3, 0, chart)
