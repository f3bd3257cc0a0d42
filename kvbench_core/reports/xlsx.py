"""Excel workbooks (xlsxwriter): one result in detail, or many results side by side.

A result's workbook restates the experiment the way the JSON does, one
sheet per concern: Summary (headline), Tiers (bytes, ops, bandwidth,
total/host/device percentiles), QoS (per class vs SLA), Timeseries,
Autoscaler, Clients (scaled-out runs), Trials (trials summaries), Spec,
Declaration, Environment.  The comparison workbook has one row per result
and one column per key figure (``reports.metrics``).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import UserError
from kvbench_core.reports import autoscaler_trajectories, require
from kvbench_core.reports.metrics import HEADLINE, figure_values

PERCENTILES = ("p50", "p95", "p99", "p99.9", "mean", "max")
MAX_CELL_TEXT = 32767
GB = 1e9


def _cell(value: Any) -> Any:
    """Spreadsheet-friendly: nested values as compact JSON, None as an empty cell, text within Excel's
    32767-character cell limit."""
    if isinstance(value, dict | list):
        value = json.dumps(value, default=str)
    if isinstance(value, str) and len(value) > MAX_CELL_TEXT:
        return value[:MAX_CELL_TEXT - 1] + "…"
    return value


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` -> ``[("a.b", 1)]``; lists of scalars stay one value."""
    if isinstance(data, dict) and data:
        return [row for key, value in data.items() for row in _flatten(value, f"{prefix}.{key}" if prefix else key)]
    if isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        return [row for i, value in enumerate(data) for row in _flatten(value, f"{prefix}[{i}]")]
    return [(prefix, data)]


class _Book:
    """A workbook with the two shapes every sheet here takes: a table, or name/value pairs."""

    def __init__(self, path: Path) -> None:
        xlsxwriter = require("xlsxwriter", "xlsx output")
        self.workbook = xlsxwriter.Workbook(str(path), {"nan_inf_to_errors": True, "strings_to_formulas": False,
                                                        "strings_to_urls": False})  # text stays text
        self.bold = self.workbook.add_format({"bold": True, "bg_color": "#DDEBF7", "border": 1})
        self.title = self.workbook.add_format({"bold": True, "font_size": 13})

    def table(self, name: str, headers: list[str], rows: list[list[Any]], title: str | None = None) -> None:
        sheet = self.workbook.add_worksheet(name)
        top = 0
        if title:
            sheet.write(0, 0, title, self.title)
            top = 2
        sheet.write_row(top, 0, headers, self.bold)
        for r, row in enumerate(rows, start=top + 1):
            for c, value in enumerate(row):
                sheet.write(r, c, _cell(value))
        widths = [max([len(str(h)), *(len(str(_cell(row[c]))) for row in rows if c < len(row))])
                  for c, h in enumerate(headers)]
        for c, width in enumerate(widths):
            sheet.set_column(c, c, min(max(width + 2, 8), 60))
        sheet.freeze_panes(top + 1, 1)
        if rows:
            sheet.autofilter(top, 0, top + len(rows), len(headers) - 1)

    def pairs(self, name: str, rows: list[tuple[str, Any]], headers: tuple[str, ...] = ("field", "value"),
              title: str | None = None) -> None:
        self.table(name, list(headers), [list(row) for row in rows], title)

    def close(self) -> None:
        self.workbook.close()


def _write_atomically(path: Path, fill: Any) -> Path:
    """Build the workbook in a temp file and rename, so a failure never leaves half a workbook.  A path
    that cannot take a file (a directory, a name under a file, a read-only place) is the user's error."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        book = _Book(tmp)
        fill(book)
        book.close()  # xlsxwriter creates the file here; its FileCreateError carries the OSError
        os.replace(tmp, path)
    except Exception as error:
        cause = error if isinstance(error, OSError) else error.__context__  # xlsxwriter wraps the OSError
        if not isinstance(cause, OSError):
            raise
        raise UserError(f"{path}: cannot write the workbook: {cause.strerror or cause}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return path


def write_workbook(result: dict[str, Any], path: Path) -> Path:
    """The detailed workbook of one result (a run, a merged multi-client run, or a trials summary)."""
    return _write_atomically(path, lambda book: _fill_result(book, result))


def write_comparison(results: list[tuple[str, dict[str, Any]]], path: Path) -> Path:
    """One row per (label, result), one column per key figure; trials summaries contribute medians."""
    return _write_atomically(path, lambda book: _fill_comparison(book, results))


def _fill_result(book: _Book, result: dict[str, Any]) -> None:
    metrics = result.get("metrics") or {}
    book.pairs("Summary", _summary_rows(result), title=f"kvbench result: {result['run']['name'] or 'run'} "
               f"({result['run']['id']})")
    if "trials" in result:
        _trials_sheet(book, result["trials"])
    if metrics.get("tiers"):
        _tiers_sheet(book, metrics["tiers"])
    if metrics.get("qos"):
        _qos_sheet(book, metrics["qos"])
    if "timeseries" in result:
        _timeseries_sheet(book, result["timeseries"])
    if "autoscaling" in result:
        _autoscaler_sheet(book, result)
    if result.get("clients"):
        _clients_sheet(book, result)
    book.pairs("Spec", [("as_written." + k, v) for k, v in _flatten(result["spec"]["as_written"])]
               + [("resolved." + k, v) for k, v in _flatten(result["spec"]["resolved"])]
               + [("sha256", result["spec"]["sha256"])], headers=("path", "value"))
    declaration = result.get("declaration") or {}
    book.table("Declaration", ["section", "field", "value", "source"],
               [[section, name, entry.get("value"), entry.get("source")]
                for section, fields in declaration.items() if isinstance(fields, dict)
                for name, entry in fields.items()]
               # declaration.notes is free text, not a section of fields
               + [[section, "", text, "declared"] for section, text in declaration.items()
                  if not isinstance(text, dict)])
    book.pairs("Environment", _flatten(result.get("environment") or {}), headers=("field", "value"))


def _summary_rows(result: dict[str, Any]) -> list[tuple[str, Any]]:
    run, spec = result["run"], result["spec"]["resolved"]
    metrics = result.get("metrics") or {}
    head = metrics.get("headline") or {}
    rows: list[tuple[str, Any]] = [
        ("status", run["status"]), ("stop reason", run["stop_reason"]), ("error", run.get("error")),
        ("kind", run.get("kind", "run")), ("model", (result.get("model") or {}).get("name")),
        ("users", spec["workload"]["users"]), ("users scope", spec["workload"]["users_scope"]),
        ("clients", (result.get("scale_out") or {}).get("clients", 1)), ("trials", spec["trials"]),
        ("duration s", spec.get("duration")), ("seed", spec["seed"]),
        ("tiers", " -> ".join(f"{t['name']} ({t['backend']}, {t['capacity']})" for t in spec["cache"]["tiers"])),
        ("measured window s", (metrics.get("window") or {}).get("measured_s")),
        ("traced", run.get("traced")), ("", None),
    ]
    rows += [(f"{f.label}" + (f" ({f.unit})" if f.unit else "") + (" [median]" if "trials" in result else ""),
              head.get(f.key)) for f in HEADLINE]
    rows.append(("persistent tier", head.get("persistent_tier")))
    if "scale_out" in result:
        rows += [("", None)] + [(f"scale_out.{k}", v) for k, v in _flatten(result["scale_out"])]
    return rows


def _trials_sheet(book: _Book, trials: dict[str, Any]) -> None:
    count = len(trials["runs"])
    headers = ["metric", "unit", "median", "min", "max", "cv", *(f"trial {r['trial']}" for r in trials["runs"])]
    rows = [[s["label"], s["unit"], s["median"], s["min"], s["max"], s["cv"], *s["values"]]
            for s in trials["metrics"].values()]
    book.table("Trials", headers, rows, title=f"{trials['count']} of {trials['requested']} trials counted "
               f"(completed); {count} listed: " + ", ".join(f"{r['file']} [{r['status']}]" for r in trials["runs"]))


def _tiers_sheet(book: _Book, tiers: dict[str, Any]) -> None:
    layers = ("total", "host", "device")
    headers = ["tier", "backend", "op", "ops", "bytes", "GB", "bandwidth GB/s", "active window s", "commands",
               "errors", *(f"{layer} {p} ms" for layer in layers for p in PERCENTILES)]
    rows = []
    for name, tier in tiers.items():
        for op in ("read", "write"):
            stats = tier[op]
            bandwidth = stats["bandwidth_bytes_per_s"]
            rows.append([name, tier["backend"], op, stats["ops"], stats["bytes"], stats["bytes"] / GB,
                         None if bandwidth is None else bandwidth / GB, stats["active_window_s"], stats["commands"],
                         stats["errors"],
                         *(stats["latency_ms"][layer][p] for layer in layers for p in PERCENTILES)])
    book.table("Tiers", headers, rows)


def _qos_sheet(book: _Book, qos: dict[str, Any]) -> None:
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


def _timeseries_sheet(book: _Book, series: list[dict[str, Any]]) -> None:
    classes = list(dict.fromkeys(q for p in series for q in p.get("e2e_p95_ms") or {}))
    tiers = list(dict.fromkeys(t for p in series for t in p.get("occupancy") or {}))
    headers = ["t s", "interval s", "users", "requests", "tokens/s", "read GB/s", "write GB/s", "storage p95 ms",
               "queue", *(f"e2e p95 {q} ms" for q in classes), *(f"{t} occupancy GB" for t in tiers)]
    rows = [[p["t_s"], p["interval_s"], p.get("users"), p.get("requests"), p.get("tokens_per_s"),
             p.get("read_bytes_per_s", 0) / GB, p.get("write_bytes_per_s", 0) / GB, p.get("storage_p95_ms"),
             p.get("queue"), *((p.get("e2e_p95_ms") or {}).get(q) for q in classes),
             *(((p.get("occupancy") or {}).get(t) or {}).get("bytes", 0) / GB for t in tiers)] for p in series]
    book.table("Timeseries", headers, rows)


def _autoscaler_sheet(book: _Book, result: dict[str, Any]) -> None:
    trajectories = autoscaler_trajectories(result)
    keys = list(dict.fromkeys(k for _, steps in trajectories for step in steps for k in step))
    rows = [[label, *(step.get(k) for k in keys)] for label, steps in trajectories for step in steps]
    summary = result["autoscaling"].get("summary") or {}
    title = "autoscaler summary: " + json.dumps(summary, default=str) if summary else (
        "no autoscaler decisions in this run" if not rows else None)
    book.table("Autoscaler", ["who", *keys], rows, title=title)


def _clients_sheet(book: _Book, result: dict[str, Any]) -> None:
    clients = result["clients"]
    tiers = list((result.get("metrics") or {}).get("tiers") or {})
    headers = ["index", "host", "pid", "status", "stop reason", "users", "seed", "requests", "tok/s wall-clock",
               "e2e p95 ms", *(f"{t} {op} GB/s" for t in tiers for op in ("read", "write"))]
    rows = []
    for client in clients:
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
    scale = result["scale_out"]
    book.table("Clients", headers, rows, title=f"{scale['clients']} {scale['label']}s ({scale['mode']}), users "
               f"{scale['users_scope']}: {scale['users_total']} in total; clock skew {scale['clock_skew_s']} s")


def _fill_comparison(book: _Book, results: list[tuple[str, dict[str, Any]]]) -> None:
    values = [figure_values(result) for _, result in results]
    keys = list(dict.fromkeys(key for v in values for key in v))
    figures = {key: next(v[key].figure for v in values if key in v) for key in keys}
    headers = ["result", "name", "id", "kind", "status", "model", "users", "clients", "trials", "duration s",
               *(f"{figures[k].label}" + (f" ({figures[k].unit})" if figures[k].unit else "") for k in keys)]
    rows = []
    for (label, result), figure_row in zip(results, values, strict=True):
        spec = result["spec"]["resolved"]
        rows.append([label, result["run"]["name"], result["run"]["id"], result["run"].get("kind", "run"),
                     result["run"]["status"], (result.get("model") or {}).get("name"), spec["workload"]["users"],
                     (result.get("scale_out") or {}).get("clients", 1),
                     (result.get("trials") or {}).get("count", 1), spec.get("duration"),
                     *(figure_row[k].value if k in figure_row else None for k in keys)])
    book.table("Comparison", headers, rows, title="one row per result; trials summaries show medians")
