"""``kvbench report RESULT...``: xlsx workbooks and png plots from existing result files.

Without options every result gets ``<stem>.xlsx`` and its plots next to it.
``--xlsx OUT`` writes one workbook: the detailed one for a single result, a
comparison (one row per result) for several.  ``--png DIR`` puts the plots
of every result in DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvbench_core.reports import require_formats, write_reports
from kvbench_core.reports.plots import plot_result
from kvbench_core.reports.xlsx import write_comparison, write_workbook
from kvbench_core.results.result import read_result


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="xlsx workbook and png plots from result files",
        description="xlsx workbook and png plots from result files.  Without --xlsx or --png, every result "
                    "gets <stem>.xlsx and its plots (<stem>-throughput.png, -latency-cdf.png, -occupancy.png) "
                    "next to it.")
    parser.add_argument("results", nargs="+", metavar="RESULT", help="kvbench result JSON files")
    parser.add_argument("--xlsx", metavar="OUT", help="one workbook: detailed for one result, a comparison "
                        "table (one row per result) for several")
    parser.add_argument("--png", metavar="DIR", help="write every result's plots into DIR")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    wanted = [fmt for fmt, option in (("xlsx", args.xlsx), ("png", args.png)) if option] or ["xlsx", "png"]
    require_formats(wanted)
    paths = [Path(p) for p in args.results]
    results = [read_result(p) for p in paths]
    written: list[Path] = []
    if not args.xlsx and not args.png:  # the default: everything, next to each result
        for path, result in zip(paths, results, strict=True):
            written += write_reports(result, path, ["xlsx", "png"])
    if args.xlsx:
        out = Path(args.xlsx)
        written.append(write_workbook(results[0], out) if len(results) == 1
                       else write_comparison([(str(p), r) for p, r in zip(paths, results, strict=True)], out))
    if args.png:
        for path, result in zip(paths, results, strict=True):
            written += plot_result(result, Path(args.png), path.stem)
    for path in written:
        print(path)
    return 0
