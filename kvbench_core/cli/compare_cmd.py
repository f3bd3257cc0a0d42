"""``kvbench compare A.json B.json [...]``: key figures side by side, ratios against the first.

Like the seed's §5.2 fast-vs-slow table.  With trials summaries, a figure
whose trial ranges overlap is marked "overlap": not a real difference.  ``--html FILE`` also writes the
comparison as a page with the curves overlaid (docs/compare.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.table import Table

from kvbench_core.cli.console import console
from kvbench_core.cli.result_files import read_documents
from kvbench_core.contracts.errors import UserError
from kvbench_core.reports.compare import Cell, caveats, compare, rows_as_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="compare results side by side (ratios vs the first)")
    parser.add_argument("results", nargs="+", metavar="RESULT",
                        help="result or trials-summary JSON files; the first is the baseline")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--html", metavar="FILE", type=Path, default=None,
                        help="also write a self-contained page with the results' curves overlaid (latency tails "
                             "per tier, bandwidth over time, per-class p95); never replaces a file")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if len(args.results) < 2:
        raise UserError("compare: give at least two results (the first is the baseline)")
    results = read_documents(args.results, ("run", "metrics"))
    labels = [Path(p).stem for p in args.results]
    rows = compare(results)
    for note in caveats(results, labels):
        print(f"kvbench: warning: {note}", file=sys.stderr)
    if args.html is not None:
        from kvbench_core.reports.compare_html import write_compare_html

        print(f"page: {write_compare_html(list(zip(labels, results, strict=True)), args.html)}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows_as_json(rows, labels), indent=2))
        return 0
    table = Table("metric", "unit", *labels, title=f"kvbench compare (ratios vs {labels[0]})")
    for row in rows:
        table.add_row(row.figure.label, row.figure.unit, *(_cell(cell, row.figure.better) for cell in row.cells))
    console().print(table)
    if any(cell.overlap for row in rows for cell in row.cells):
        console().print("overlap: the trial ranges (min..max) overlap; not a real difference")
    return 0


def _cell(cell: Cell, better: str) -> str:
    value = cell.value
    if value is None or value.value is None:
        return "-"
    text = _number(value.value)
    if value.trials > 1:
        text += f" [{_number(value.low)}..{_number(value.high)}]"
    if cell.ratio is not None:
        improved = cell.ratio > 1 if better == "higher" else cell.ratio < 1
        if cell.overlap:
            colour = "yellow"
        elif cell.ratio == 1:
            colour = "white"
        else:
            colour = "green" if improved else "red"
        text += f" [{colour}]({cell.ratio:.2f}x)[/{colour}]"
    if cell.overlap:
        text += " overlap"
    return text


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.1f}"
