"""A self-contained HTML report of one result: one file that opens offline in any browser.

Headline figures with their definitions, the QoS verdicts with why and what next, per-tier tables
(capacity, ops, IOPS, bandwidth, total/host/device percentiles), the plots (latency tail view with p95
and SLA marked, generated tokens/s and per-tier bandwidth over time, occupancy) embedded as PNG data
URIs, the workload, the infrastructure declaration, the environment and the spec.  No script, font or
style sheet is fetched from anywhere: everything is inline, so the file can be mailed, archived or
attached to a submission and still render the same.  The one inline script only checks, once loaded,
that every embedded plot decoded, and reports a broken one on the console (the browser test reads it).
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import UserError
from kvbench_core.contracts.units import format_bytes
from kvbench_core.reports import flatten
from kvbench_core.reports.capacity import answer_line, curve_table
from kvbench_core.reports.key_figures import HEADLINE, op_figures
from kvbench_core.reports.status_words import failed_invariants, status_reason
from kvbench_core.reports.verdicts import explain, starved_classes
from kvbench_core.results.document import ResultDocument
from kvbench_core.runspec.jsonfile import temp_beside

GB = 1e9
#: Headline entries that are not figures (``reports.key_figures.HEADLINE`` defines the figures).
OTHER_DEFINITIONS = {"persistent_tier": "the first persistent (non-memory) tier: the one the nvme_* figures are of"}
PERCENTILES = ("p50", "p95", "p99", "p99.9", "max")

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1180px;
       color: #1a1a1a; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em;
     border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
.meta { color: #555; } .status-completed { color: #1a7f37; } .status-other { color: #b35900; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.6em; vertical-align: top; }
th { background: #eef3f8; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.met { color: #1a7f37; font-weight: 600; } .missed { color: #cf222e; font-weight: 600; }
.why { margin: 0.3em 0 0.1em 0; } .next { margin: 0 0 0.8em 1.5em; color: #444; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
details pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
.definition { color: #555; font-size: 0.9em; }
"""

#: Run once the page has loaded: an embedded plot that did not decode is an error on the console.
CHECK_SCRIPT = """
window.addEventListener("load", function () {
  var broken = Array.prototype.filter.call(document.images, function (img) {
    return !img.complete || img.naturalWidth === 0; });
  broken.forEach(function (img) { console.error("kvbench report: plot did not render: " + img.alt); });
  document.body.setAttribute("data-plots", broken.length ? "broken" : "ok");
});
"""


def write_html(document: ResultDocument, path: Path) -> Path:
    """Write the report to ``path`` through a temporary file, so a failure never leaves half a page."""
    page = render_html(document)
    try:
        with temp_beside(path) as tmp:
            Path(tmp).write_text(page, encoding="utf-8")
            os.replace(tmp, path)
    except OSError as error:
        raise UserError(f"{path}: cannot write the HTML report: {error.strerror or error}") from None
    return path


def render_html(document: ResultDocument) -> str:
    """The whole page as one string."""
    title = f"kvbench: {document.run.name or 'run'} {document.run.id}"
    sections = [_header(document), _verdicts(document), _capacity(document), _headline(document),
                _tiers(document), _plots(document), _workload(document),
                _pairs_section("Infrastructure declaration", _declaration_rows(document)),
                _pairs_section("Environment", flatten(document.environment)), _spec(document)]
    body = "\n".join(section for section in sections if section)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n"
            f"<script>{CHECK_SCRIPT}</script>\n</body></html>\n")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _number(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_td(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<td class="num">{_number(value)}</td>'
    if isinstance(value, dict | list):
        value = json.dumps(value, default=str)
    return f"<td>{_e(value)}</td>"


def _header(document: ResultDocument) -> str:
    run = document.run
    status = run.status
    css = "status-completed" if status == "completed" else "status-other"
    model = document.model or {}
    window = document.window.get("measured_s")
    facts = [f"kvbench {_e(document.kvbench_version)}",
             f"model {_e(model.get('name'))} {_e(model.get('dtype'))} tp {_e(model.get('tp'))}"
             + (f" ({format_bytes(model['bytes_per_token_all_ranks'])}/token)"
                if model.get("bytes_per_token_all_ranks") else ""),
             f"measured window {_number(window)} s" if window is not None else "",
             f"stop: {_e(run.stop_reason)}"]
    error = f"<p class=\"missed\">error: {_e(run.error)}</p>" if run.error else ""
    return (f"<h1>{_e(run.name or 'run')} <span class=\"{css}\">[{_e(status)}]</span></h1>"
            f"<p class=\"meta\">result {_e(run.id)} &middot; {' &middot; '.join(f for f in facts if f)}</p>"
            f"<p class=\"meta\">status rule: {_e(status_reason(document))}</p>{error}{_attention(document)}")


def _attention(document: ResultDocument) -> str:
    """The result's warnings and failed invariants, each listed; nothing when there are none."""
    parts = []
    for heading, lines in (("Warnings", list(document.warnings)), ("Failed invariants", failed_invariants(document))):
        if lines:
            items = "".join(f"<li>{_e(line)}</li>" for line in lines)
            parts.append(f"<h2>{heading}</h2><ul class=\"missed\">{items}</ul>")
    return "".join(parts)


def _verdicts(document: ResultDocument) -> str:
    verdicts = explain(document)
    if not verdicts:
        return ""
    lines = []
    for verdict in verdicts:
        head, _, rest = verdict.why.partition(": ")  # "responsive MISSED", the rest
        lines.append(f"<p class=\"why\"><span class=\"{'met' if verdict.met else 'missed'}\">{_e(head)}</span>: "
                     f"{_e(rest)}</p><p class=\"next\">{_e(verdict.next_step)}</p>")
    lines += [f"<p class=\"why\"><span class=\"missed\">{_e(line)}</span></p>" for line in starved_classes(document)]
    return "<h2>QoS verdicts</h2>" + "".join(lines)


def _capacity(document: ResultDocument) -> str:
    """The judged search's answer and the curve it measured (reports/capacity.py); the plot is in Plots."""
    answer = answer_line(document)
    if answer is None:
        return ""
    headers, rows = curve_table(document)
    return f"<h2>Capacity</h2><p class=\"why\">{_e(answer)}</p>" + _table(headers, rows)


def _headline(document: ResultDocument) -> str:
    head = document.headline
    if not head:
        return ""
    known = {f.key: f for f in HEADLINE}
    rows = []
    for key, value in head.items():
        figure = known.get(key)
        label = figure.label if figure else key
        unit = figure.unit if figure else ""
        definition = figure.definition if figure and figure.definition else OTHER_DEFINITIONS.get(
            key, "see docs/metrics.md")
        rows.append(f"<tr><td>{_e(label)}<br><code>{_e(key)}</code></td>{_td(value)}<td>{_e(unit)}</td>"
                    f"<td class=\"definition\">{_e(definition)}</td></tr>")
    trials = document.trials
    heading = f"Headline figures (median of {trials.count} trials)" if trials else "Headline figures"
    return (f"<h2>{heading}</h2><table><thead><tr><th>figure</th><th>value</th><th>unit</th>"
            f"<th>definition</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _tiers(document: ResultDocument) -> str:
    tiers = document.tiers
    if not tiers:
        return ""
    return ("<h2>Tiers</h2><p class=\"definition\">IOPS: entry operations per second of the op's active window; "
            "GB and GB/s are 10<sup>9</sup> bytes, GiB 2<sup>30</sup>. Latencies are per KV entry: total = host "
            "(kvbench's copies and system calls) + device (waiting on the storage).</p>"
            f"{_tier_table(tiers)}<h3>Latency per layer</h3>{_layer_latency_table(tiers)}")


def _tier_table(tiers: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per tier and op: what it moved and how fast; a shared tier's stores without a transfer
    (docs/metrics.md) only when some tier made one."""
    columns = ["capacity_gib", "ops", "iops", "gb", "bandwidth_gb_s", "errors"]
    headers = ["tier", "backend", "op", "capacity GiB", "ops", "IOPS", "GB", "bandwidth GB/s", "errors"]
    if any(tier["write"].get("dedup_stores") for tier in tiers.values()):
        columns += ["dedup_stores", "dedup_gb"]
        headers += ["stores without a transfer", "deduplicated GB"]
    rows = [[name, tier.get("backend"), op, *(f[k] for k in columns)]
            for name, tier in tiers.items() for op in ("read", "write") for f in (op_figures(tier, op),)]
    return _table(headers, rows)


def _layer_latency_table(tiers: Mapping[str, Mapping[str, Any]]) -> str:
    """Per tier, op and layer (total, host, device) the percentiles of its operations."""
    rows = [[name, op, layer, *((tier[op].get("latency_ms") or {}).get(layer, {}).get(p) for p in PERCENTILES)]
            for name, tier in tiers.items() for op in ("read", "write") for layer in ("total", "host", "device")]
    return _table(["tier", "op", "layer", *(f"{p} ms" for p in PERCENTILES)], rows)


def _plots(document: ResultDocument) -> str:
    from kvbench_core.reports.plots import figures, png_bytes

    images = []
    for name, figure in figures(document):
        data = base64.b64encode(png_bytes(figure)).decode("ascii")
        images.append(f"<h3>{_e(name)}</h3><img alt=\"{_e(name)}\" src=\"data:image/png;base64,{data}\">")
    return "<h2>Plots</h2>" + "".join(images) if images else ""


def _workload(document: ResultDocument) -> str:
    stats = (document.workload or {}).get("stats") or {}
    rows = [(f"{section}.{key}", value) for section, values in stats.items() if isinstance(values, dict)
            for key, value in values.items()]
    rows += [(key, value) for key, value in stats.items() if not isinstance(value, dict)]
    return _pairs_section("Workload", rows)


def _declaration_rows(document: ResultDocument) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for section, fields in document.declaration.items():
        if isinstance(fields, dict):
            rows += [(f"{section}.{name} ({(entry or {}).get('source', '')})", (entry or {}).get("value"))
                     for name, entry in fields.items()]
        else:
            rows.append((section, fields))
    return rows


def _pairs_section(title: str, rows: list[tuple[str, Any]]) -> str:
    if not rows:
        return ""
    return f"<h2>{_e(title)}</h2>" + _table(["field", "value"], [list(row) for row in rows])


def _spec(document: ResultDocument) -> str:
    spec = document.spec
    resolved = json.dumps(spec.resolved, indent=2, default=str)
    written = json.dumps(spec.as_written, indent=2, default=str)
    return (f"<h2>Spec</h2><p class=\"meta\">sha256 {_e(spec.sha256)} &middot; "
            f"<code>kvbench run RESULT.json</code> re-runs exactly this spec</p>"
            f"<details><summary>as written</summary><pre>{_e(written)}</pre></details>"
            f"<details><summary>resolved (defaults filled, sizes in bytes)</summary><pre>{_e(resolved)}</pre>"
            "</details>")
