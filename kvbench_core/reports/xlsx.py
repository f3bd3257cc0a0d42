"""Excel workbooks (xlsxwriter): one result in detail, or many results side by side.

A result's workbook restates the experiment the way the JSON does, one
sheet per concern: Summary (headline), Tiers (capacity, bytes, ops, IOPS,
bandwidth, total/host/device percentiles), Latency (CDF points per tier
and QoS class, with native charts), QoS (per class vs SLA), Timeseries
(with native charts), Autoscaler, Clients (scaled-out runs), Trials
(trials summaries), Spec, Declaration, Environment.  The comparison
workbook has one row per result and one column per key figure
(``reports.key_figures``).

Every number cell gets the number format its column's unit asks for
(``_number_format``: ms and GB with three decimals, counts with thousands
separators, rates and shares as percentages), and every unit is named in
its header: GB and GB/s are decimal (10^9), GiB binary, as in the JSON.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kvbench_core.contracts.errors import UserError
from kvbench_core.reports import autoscaler_trajectories, flatten, require
from kvbench_core.reports.capacity import capacity_sheet
from kvbench_core.reports.key_figures import HEADLINE, figure_values, op_figures
from kvbench_core.reports.series_table import series_table
from kvbench_core.reports.status_words import failed_invariants, status_reason
from kvbench_core.results.document import ResultDocument, TrialsSection
from kvbench_core.runspec.jsonfile import temp_beside

PERCENTILES = ("p50", "p95", "p99", "p99.9", "mean", "max")
MAX_CELL_TEXT = 32767
GB = 1e9
GIB = 1 << 30
#: CDF points per series in the Latency sheet: every percent, and the tail beyond p99.
CDF_FRACTIONS = sorted({*np.linspace(0.0, 1.0, 101).round(4).tolist(), 0.995, 0.999})
#: (pattern on a header or label, Excel number format), first match wins.
NUMBER_FORMATS = (
    (r"\bms\b", "#,##0.000"),
    (r"\b(GB|GiB|TB)(/s)?\b", "#,##0.000"),
    (r"tok(ens)?/s", "#,##0.0"),
    (r"\b(rate|share|fraction|cv)\b", "0.0%"),
    (r"(^| )s( \[|\)|$)|\bs$|window s", "#,##0.000"),
    (r"\b(ops|IOPS|bytes|requests|commands|errors|users|queue|entries|count|pid|index|seed)\b", "#,##0"),
)


def _number_format(label: str) -> str | None:
    """The number format a column or row label's unit asks for (None: General)."""
    for pattern, number_format in NUMBER_FORMATS:
        if re.search(pattern, label):
            return number_format
    return None


def _cell(value: Any) -> Any:
    """Spreadsheet-friendly: nested values as compact JSON, None as an empty cell, text within Excel's
    32767-character cell limit."""
    if isinstance(value, dict | list):
        value = json.dumps(value, default=str)
    if isinstance(value, str) and len(value) > MAX_CELL_TEXT:
        return value[:MAX_CELL_TEXT - 1] + "…"
    return value


class _Book:
    """A workbook with the two shapes every sheet here takes: a table, or name/value pairs."""

    def __init__(self, path: Path) -> None:
        xlsxwriter = require("xlsxwriter", "xlsx output")
        self.workbook = xlsxwriter.Workbook(str(path), {"nan_inf_to_errors": True, "strings_to_formulas": False,
                                                        "strings_to_urls": False})  # text stays text
        self.bold = self.workbook.add_format({"bold": True, "bg_color": "#DDEBF7", "border": 1, "text_wrap": True,
                                              "valign": "top"})
        self.title = self.workbook.add_format({"bold": True, "font_size": 13})
        self._formats: dict[str, Any] = {}

    def number(self, number_format: str | None) -> Any:
        if number_format is None:
            return None
        if number_format not in self._formats:
            self._formats[number_format] = self.workbook.add_format({"num_format": number_format})
        return self._formats[number_format]

    def table(self, name: str, headers: list[str], rows: list[list[Any]], title: str | None = None) -> Any:
        """The sheet, with each number formatted as its column header's unit says."""
        sheet = self.workbook.add_worksheet(name)
        top = 0
        if title:
            sheet.write(0, 0, title, self.title)
            top = 2
        sheet.write_row(top, 0, headers, self.bold)
        column_formats = [self.number(_number_format(str(h))) for h in headers]
        for r, row in enumerate(rows, start=top + 1):
            for c, value in enumerate(row):
                self._write(sheet, r, c, value, column_formats[c] if c < len(column_formats) else None)
        widths = [max([min(len(str(h)), 18), *(len(_shown(row[c])) for row in rows if c < len(row))])
                  for c, h in enumerate(headers)]
        for c, width in enumerate(widths):
            sheet.set_column(c, c, min(max(width + 2, 8), 60))
        sheet.freeze_panes(top + 1, 1)
        if rows:
            sheet.autofilter(top, 0, top + len(rows), len(headers) - 1)
        sheet.kvbench_top = top  # where the header row is, for charts over the table
        return sheet

    def pairs(self, name: str, rows: list[tuple[str, Any]], headers: tuple[str, ...] = ("field", "value"),
              title: str | None = None) -> Any:
        """Name/value rows; a number is formatted as its name's unit says ("... (ms)", "... GB")."""
        sheet = self.table(name, list(headers), [[label, None] for label, _ in rows], title)
        top = sheet.kvbench_top
        for r, (label, value) in enumerate(rows, start=top + 1):
            self._write(sheet, r, 1, value, self.number(_number_format(str(label))))
        return sheet

    @staticmethod
    def _write(sheet: Any, row: int, col: int, value: Any, number_format: Any) -> None:
        value = _cell(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and number_format is not None:
            sheet.write_number(row, col, value, number_format)
        else:
            sheet.write(row, col, value)

    def close(self) -> None:
        self.workbook.close()


def _shown(value: Any) -> str:
    """Roughly what a cell shows, for the column width."""
    value = _cell(value)
    if isinstance(value, float):
        return f"{value:,.3f}"
    return str(value)


def _write_atomically(path: Path, fill: Any) -> Path:
    """Build the workbook in a temp file and rename, so a failure never leaves half a workbook.  A path
    that cannot take a file (a directory, a name under a file, a read-only place) is the user's error."""
    try:
        with temp_beside(path) as name:
            book = _Book(Path(name))
            fill(book)
            book.close()  # xlsxwriter creates the file here; its FileCreateError carries the OSError
            os.replace(name, path)
    except Exception as error:
        cause = error if isinstance(error, OSError) else error.__context__  # xlsxwriter wraps the OSError
        if not isinstance(cause, OSError):
            raise
        raise UserError(f"{path}: cannot write the workbook: {cause.strerror or cause}") from None
    return path


def write_workbook(document: ResultDocument, path: Path) -> Path:
    """The detailed workbook of one result (a run, a merged multi-client run, or a trials summary)."""
    return _write_atomically(path, lambda book: _fill_result(book, document))


def write_comparison(results: list[tuple[str, ResultDocument]], path: Path) -> Path:
    """One row per (label, result), one column per key figure; trials summaries contribute medians."""
    return _write_atomically(path, lambda book: _fill_comparison(book, results))


def _fill_result(book: _Book, document: ResultDocument) -> None:
    book.pairs("Summary", _summary_rows(document), title=f"kvbench result: {document.run.name or 'run'} "
               f"({document.run.id})")
    if document.trials is not None:
        _trials_sheet(book, document.trials)
    _measurement_sheets(book, document)
    spec = document.spec
    book.pairs("Spec", [("as_written." + k, v) for k, v in flatten(spec.as_written)]
               + [("resolved." + k, v) for k, v in flatten(spec.resolved)] + [("sha256", spec.sha256)],
               headers=("path", "value"))
    book.table("Declaration", ["section", "field", "value", "source"], _declaration_rows(document.declaration))
    book.pairs("Environment", flatten(dict(document.environment)), headers=("field", "value"))


def _measurement_sheets(book: _Book, document: ResultDocument) -> None:
    """The sheets of what the run measured, each where the result has its section."""
    if document.tiers:
        _tiers_sheet(book, document.tiers)
        _latency_sheet(book, document)
    if document.class_figures:
        _qos_sheet(book, document.class_figures)
    if document.timeseries is not None:
        _timeseries_sheet(book, list(document.timeseries))
    if document.autoscaling is not None:
        _autoscaler_sheet(book, document)
    if document.clients:
        _clients_sheet(book, document)


def _declaration_rows(declaration: Mapping[str, Any]) -> list[list[Any]]:
    """One row per declared or detected field; ``declaration.notes`` is free text, not a section of fields."""
    rows = [[section, name, entry.get("value"), entry.get("source")]
            for section, fields in declaration.items() if isinstance(fields, dict) for name, entry in fields.items()]
    return rows + [[section, "", text, "declared"] for section, text in declaration.items()
                   if not isinstance(text, dict)]


def _summary_rows(document: ResultDocument) -> list[tuple[str, Any]]:
    run, spec = document.run, document.spec.resolved
    head = document.headline
    rows: list[tuple[str, Any]] = [
        ("status", run.status), ("status rule", status_reason(document)),
        ("warnings", "\n".join(document.warnings) or None),
        ("failed invariants", "\n".join(failed_invariants(document)) or None),
        ("stop reason", run.stop_reason), ("error", run.error),
        ("kind", run.kind or "run"), ("model", (document.model or {}).get("name")),
        ("users", spec["workload"]["users"]), ("users scope", spec["workload"]["users_scope"]),
        ("clients", (document.scale_out or {}).get("clients", 1)), ("trials", spec["trials"]),
        ("duration s", spec.get("duration")), ("seed", spec["seed"]),
        ("tiers", " -> ".join(f"{t['name']} ({t['backend']}, {_capacity_text(t['capacity'])})"
                              for t in spec["cache"]["tiers"])),
        ("measured window s", document.window.get("measured_s")),
        *((f"phase {name} s", seconds) for name, seconds in (run.phases_s or {}).items()),
        ("traced", run.traced), ("", None),
    ]
    median = " [median]" if document.is_summary else ""
    rows += [(f"{f.label}" + (f" ({f.unit})" if f.unit else "") + median, head.get(f.key)) for f in HEADLINE]
    rows.append(("persistent tier", head.get("persistent_tier")))
    if document.scale_out is not None:
        rows += [("", None)] + [(f"scale_out.{k}", v) for k, v in flatten(dict(document.scale_out))]
    return rows


def _trials_sheet(book: _Book, trials: TrialsSection) -> None:
    headers = ["metric", "unit", "median", "min", "max", "cv", *(f"trial {r.trial}" for r in trials.runs)]
    rows = [[s["label"], s["unit"], s["median"], s["min"], s["max"], s["cv"], *s["values"]]
            for s in trials.metrics.values()]
    book.table("Trials", headers, rows, title=f"{trials.count} of {trials.requested} trials counted "
               f"(completed); {len(trials.runs)} listed: " + ", ".join(f"{r.file} [{r.status}]" for r in trials.runs))


def _capacity_text(capacity: Any) -> str:
    return f"{capacity / GIB:,.2f} GiB" if isinstance(capacity, int | float) else str(capacity)


def _tiers_sheet(book: _Book, tiers: Mapping[str, Mapping[str, Any]]) -> None:
    """One row per tier and operation.  IOPS are entry operations per second of the op's active window
    (first start to last end, as the bandwidth); device commands/s are the backend's own commands."""
    layers = ("total", "host", "device")
    headers = ["tier", "backend", "op", "capacity GiB", "ops", "IOPS", "device commands", "device commands/s",
               "GB", "bandwidth GB/s", "active window s", "errors", "stores without a transfer (entries)",
               "deduplicated GB",
               *(f"{layer} {p} ms" for layer in layers for p in PERCENTILES)]
    rows = []
    for name, tier in tiers.items():
        for op in ("read", "write"):
            f = op_figures(tier, op)
            rows.append([name, tier.get("backend"), op, f["capacity_gib"], f["ops"], f["iops"], f["commands"],
                         f["commands_per_s"], f["gb"], f["bandwidth_gb_s"], f["active_window_s"], f["errors"],
                         f["dedup_stores"], f["dedup_gb"],
                         *((tier[op].get("latency_ms") or {}).get(layer, {}).get(p) for layer in layers
                           for p in PERCENTILES)])
    book.table("Tiers", headers, rows)


LatencyGroup = tuple[str, list[tuple[str, Mapping[str, Any]]]]


def _latency_sheet(book: _Book, document: ResultDocument) -> None:
    """CDF points (ms at each cumulative fraction) of every tier operation's total time and of each QoS
    class's service latency, from the serialised histograms, with a native log-x scatter chart per group."""
    from kvbench_core.engine.measure.histogram import LatencyHistogram

    groups = _latency_groups(document)
    columns = [label for _, series in groups for label, _ in series]
    hists = [LatencyHistogram.from_dict(h) for _, series in groups for _, h in series]
    rows = [[q, *(h.quantile(q) * 1000.0 for h in hists)] for q in CDF_FRACTIONS]
    sheet = book.table("Latency", ["cumulative fraction", *columns], rows,
                       title="CDF points: the latency (ms) below which each fraction of operations finished")
    top, last = sheet.kvbench_top, sheet.kvbench_top + len(rows)
    column = 1
    for index, (title, series) in enumerate(groups):
        chart = book.workbook.add_chart({"type": "scatter", "subtype": "straight"})
        for label, _ in series:
            chart.add_series({"name": label, "categories": ["Latency", top + 1, column, last, column],
                              "values": ["Latency", top + 1, 0, last, 0]})
            column += 1
        chart.set_title({"name": title, "name_font": {"size": 11}})
        chart.set_x_axis({"name": "latency (ms, log)", "log_base": 10, "major_gridlines": {"visible": True}})
        chart.set_y_axis({"name": "fraction of operations", "min": 0, "max": 1, "num_format": "0%"})
        chart.set_size({"width": 620, "height": 320})
        sheet.insert_chart(top + 1 + index * 17, len(columns) + 2, chart)


def _latency_groups(document: ResultDocument) -> list[LatencyGroup]:
    """(chart title, [(column, histogram)]): per tier its ops' total time, then the QoS classes' service
    latency; a histogram with no sample, and a group left with none, are left out."""
    groups: list[LatencyGroup] = [
        (f"{name} operations per KV entry (total time)",
         [(f"{name} {op} ms", tier[op].get("histograms", {}).get("total") or {}) for op in ("read", "write")])
        for name, tier in document.tiers.items()]
    service = document.histograms.get("service_by_qos") or {}
    groups.append(("request service latency per QoS class", [(f"{q} service ms", h) for q, h in service.items()]))
    kept = [(title, [(label, h) for label, h in series if h.get("count")]) for title, series in groups]
    return [(title, series) for title, series in kept if series]


def _qos_sheet(book: _Book, qos: Mapping[str, Mapping[str, Any]]) -> None:
    """The SLA verdict beside the latency it judges (service: until the storage work is done), with the
    end-to-end latency (generation pacing included) for reference.  Results older than the service
    latency judged end to end, so their e2e figures stand in."""
    headers = ["class", "priority", "requests", "service p50 ms", "service p95 ms", "service p99 ms", "SLA p95 ms",
               "SLA p99 ms", "SLA met", "e2e p95 ms", "e2e p99 ms"]
    rows = []
    for name, q in qos.items():
        service = q.get("service_latency_ms") or q["latency_ms"]
        rows.append([name, q["priority"], q["requests"], service["p50"], service["p95"], service["p99"],
                     q["sla_p95_ms"], q["sla_p99_ms"], q["sla_met"], q["latency_ms"]["p95"], q["latency_ms"]["p99"]])
    book.table("QoS", headers, rows)


def _timeseries_sheet(book: _Book, series: list[Mapping[str, Any]]) -> None:
    """One row per interval, and native line charts of generated tokens/s and each tier's bandwidth."""
    headers, rows = series_table(series)
    sheet = book.table("Timeseries", headers, rows)
    if not series:
        return
    tokens = headers[4]
    totals = ["read GB/s", "write GB/s"]
    bandwidth = [h for h in headers if h.endswith(" GB/s") and h not in totals] or totals  # per tier, else the run's
    for index, (title, names, axis) in enumerate((
            (f"{tokens} per interval", [tokens], tokens), ("bandwidth per interval", bandwidth, "GB/s"))):
        chart = book.workbook.add_chart({"type": "scatter", "subtype": "straight"})
        top, last = sheet.kvbench_top, sheet.kvbench_top + len(series)
        for name in names:
            col = headers.index(name)
            chart.add_series({"name": name, "categories": ["Timeseries", top + 1, 0, last, 0],
                              "values": ["Timeseries", top + 1, col, last, col]})
        chart.set_title({"name": title, "name_font": {"size": 11}})
        chart.set_x_axis({"name": "seconds since measurement start"})
        chart.set_y_axis({"name": axis, "min": 0})
        chart.set_size({"width": 620, "height": 300})
        sheet.insert_chart(top + 1 + index * 16, len(headers) + 1, chart)


def _autoscaler_sheet(book: _Book, document: ResultDocument) -> None:
    trajectories = autoscaler_trajectories(document)
    keys = list(dict.fromkeys(k for _, steps in trajectories for step in steps for k in step))
    rows = [[label, *(step.get(k) for k in keys)] for label, steps in trajectories for step in steps]
    # the judged steps have their own sheet and chart (reports/capacity.py); the title keeps the answer
    summary = {k: v for k, v in document.autoscaler_summary.items() if k != "steps"}
    title = "autoscaler summary: " + json.dumps(summary, default=str) if summary else (
        "no autoscaler decisions in this run" if not rows else None)
    book.table("Autoscaler", ["who", *keys], rows, title=title)
    capacity_sheet(book, document)


def _clients_sheet(book: _Book, document: ResultDocument) -> None:
    tiers = list(document.tiers)
    headers = ["index", "host", "pid", "status", "stop reason", "users", "seed", "requests", "tok/s wall-clock",
               "e2e p95 ms", *(f"{t} {op} GB/s" for t in tiers for op in ("read", "write"))]
    rows = []
    for client in document.clients or ():
        metrics = client.get("metrics") or {}
        head = metrics.get("headline") or {}
        bandwidths = []
        for tier in tiers:
            for op in ("read", "write"):
                value = ((metrics.get("tiers") or {}).get(tier) or {}).get(op, {}).get("bandwidth_bytes_per_s")
                bandwidths.append(None if value is None else value / GB)
        rows.append([client["index"], client.get("host"), client.get("pid"), client["status"],
                     client["stop_reason"], client["users"], client["seed"], head.get("requests_completed"),
                     head.get("avg_throughput_tokens_per_sec"), head.get("end_to_end_latency_p95_ms"), *bandwidths])
    scale = document.scale_out or {}
    book.table("Clients", headers, rows, title=f"{scale['clients']} {scale['label']}s ({scale['mode']}), users "
               f"{scale['users_scope']}: {scale['users_total']} in total; clock skew {scale['clock_skew_s']} s")


def _fill_comparison(book: _Book, results: list[tuple[str, ResultDocument]]) -> None:
    values = [figure_values(result) for _, result in results]
    keys = list(dict.fromkeys(key for v in values for key in v))
    figures = {key: next(v[key].figure for v in values if key in v) for key in keys}
    headers = ["result", "name", "id", "kind", "status", "model", "users", "clients", "trials", "duration s",
               *(f"{figures[k].label}" + (f" ({figures[k].unit})" if figures[k].unit else "") for k in keys)]
    rows = [[*_run_cells(label, result), *(figure_row[k].value if k in figure_row else None for k in keys)]
            for (label, result), figure_row in zip(results, values, strict=True)]
    book.table("Comparison", headers, rows, title="one row per result; trials summaries show medians")


def _run_cells(label: str, document: ResultDocument) -> list[Any]:
    """A comparison row's first cells: which run, how it ended, and what it ran (users, clients, trials)."""
    spec, run = document.spec.resolved, document.run
    return [label, run.name, run.id, run.kind or "run", run.status, (document.model or {}).get("name"),
            spec["workload"]["users"], (document.scale_out or {}).get("clients", 1),
            document.trials.count if document.trials else 1, spec.get("duration")]
