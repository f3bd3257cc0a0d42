"""``kvbench report RESULT...``: xlsx workbooks, png plots and HTML reports from existing result files.

Without options every result gets ``<stem>.xlsx``, its plots and ``<stem>.html`` next to it.
``--xlsx OUT`` writes one workbook: the detailed one for a single result, a
comparison (one row per result) for several.  ``--png DIR`` puts the plots
of every result in DIR.  ``--html`` writes each result's self-contained HTML
report next to it, ``--html OUT`` to OUT (one result) or into the directory
OUT (several).  A report file that already exists is never overwritten unless
``--force`` says so: kvbench writes over nothing it did not create just now.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvbench_core.cli.result_files import read_documents
from kvbench_core.contracts.errors import UserError
from kvbench_core.reports import require_formats, write_reports
from kvbench_core.reports.html import write_html
from kvbench_core.reports.plots import plot_paths, plot_result
from kvbench_core.reports.xlsx import write_comparison, write_workbook
from kvbench_core.results.document import ResultDocument

NEXT_TO_RESULT = "-"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="xlsx workbook, png plots and a self-contained HTML report from result files",
        description="xlsx workbook, png plots and a self-contained HTML report from result files.  Without "
                    "--xlsx, --png or --html, every result gets <stem>.xlsx, its plots (<stem>-throughput.png, "
                    "-latency-cdf.png, -occupancy.png) and <stem>.html next to it.")
    parser.add_argument("results", nargs="+", metavar="RESULT", help="kvbench result JSON files")
    parser.add_argument("--xlsx", metavar="OUT", help="one workbook: detailed for one result, a comparison "
                        "table (one row per result) for several")
    parser.add_argument("--png", metavar="DIR", help="write every result's plots into DIR")
    parser.add_argument("--html", metavar="OUT", nargs="?", const=NEXT_TO_RESULT,
                        help="the self-contained HTML report (plots embedded, opens offline): next to each "
                             "result, or to OUT (one result) or into the directory OUT (several)")
    parser.add_argument("--force", action="store_true", help="overwrite report files that already exist")
    parser.set_defaults(handler=handle)


def targets(args: argparse.Namespace, paths: list[Path]) -> list[Path]:
    """Every file this invocation may write, known before anything is drawn."""
    default = not (args.xlsx or args.png or args.html)
    out: list[Path] = [Path(args.xlsx)] if args.xlsx else []
    for path in paths:
        if default:
            out += [path.with_suffix(".xlsx"), path.with_suffix(".html"), *plot_paths(path.parent, path.stem)]
        if args.png:
            out += plot_paths(Path(args.png), path.stem)
        if args.html:
            out.append(_html_path(args.html, path, len(paths)))
    return out


def refuse_existing(paths: list[Path]) -> None:
    """Stop before writing a byte when a target exists: it may be a file kvbench did not write."""
    existing = [str(path) for path in paths if path.is_file() or path.is_symlink()]
    if existing:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
        raise UserError(f"{shown}: already exists; kvbench report does not overwrite files "
                        f"(remove them, or pass --force)")


def handle(args: argparse.Namespace) -> int:
    chosen = [fmt for fmt, option in (("xlsx", args.xlsx), ("png", args.png), ("html", args.html)) if option]
    require_formats(chosen or ["xlsx", "png", "html"])
    paths = [Path(p) for p in args.results]
    results = read_documents(paths, ("run", "spec", "metrics"))
    if not args.force:
        refuse_existing(targets(args, paths))
    written = _write_chosen(args, paths, results) if chosen else [
        report for path, result in zip(paths, results, strict=True)  # the default: everything, next to each
        for report in write_reports(result, path, ["xlsx", "png", "html"])]
    for path in written:
        print(path)
    return 0


def _write_chosen(args: argparse.Namespace, paths: list[Path], results: list[ResultDocument]) -> list[Path]:
    """The formats asked for, where they were asked to go: one workbook (a comparison of several results),
    each result's plots and HTML page."""
    written: list[Path] = []
    if args.xlsx:
        out = Path(args.xlsx)
        written.append(write_workbook(results[0], out) if len(results) == 1
                       else write_comparison([(str(p), r) for p, r in zip(paths, results, strict=True)], out))
    if args.png:
        for path, result in zip(paths, results, strict=True):
            written += plot_result(result, Path(args.png), path.stem)
    if args.html:
        for path, result in zip(paths, results, strict=True):
            written.append(write_html(result, _html_path(args.html, path, len(paths))))
    return written


def _html_path(option: str, result_path: Path, count: int) -> Path:
    if option == NEXT_TO_RESULT:
        return result_path.with_suffix(".html")
    out = Path(option)
    if count == 1 and not out.is_dir():
        return out
    if out.exists() and not out.is_dir():
        raise UserError(f"--html {out}: {count} results need a directory, and this is a file")
    return out / f"{result_path.stem}.html"
