"""``kvbench export RESULT... --to parquet|csv|perfetto DIR``: results as data other tools read.

``parquet``/``csv`` write one tidy table per file, every result's rows stacked with a ``result`` column
(docs/export.md); ``perfetto`` writes each result's I/O log as a trace-event timeline,
``DIR/<result>.perfetto.json`` (docs/export-perfetto.md).  ``<result>`` is the file's stem, as ``compare``
labels its columns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvbench_core.cli.result_files import read_documents
from kvbench_core.contracts.errors import UserError
from kvbench_core.exports.tabular import FORMATS, export_tables
from kvbench_core.results.document import ResultDocument

TARGETS = (*FORMATS, "perfetto")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="export results as Parquet/CSV tables or a Perfetto timeline")
    parser.add_argument("results", nargs="+", metavar="RESULT", help="result JSON files")
    parser.add_argument("--to", nargs=2, required=True, metavar=("FORMAT", "DIR"),
                        help=f"the format ({', '.join(TARGETS)}) and the directory to write into "
                             "(created; no file in it is ever replaced)")
    parser.set_defaults(handler=handle)


def _labelled(paths: list[str]) -> list[tuple[str, ResultDocument]]:
    labels = [Path(p).stem for p in paths]
    twice = next((label for label in labels if labels.count(label) > 1), None)
    if twice:
        raise UserError(f"export: two results are both named {twice!r}; their rows would share one 'result' "
                        "label: rename one file")
    return list(zip(labels, read_documents(paths, ("run", "metrics")), strict=True))


def handle(args: argparse.Namespace) -> int:
    fmt, directory = args.to[0], Path(args.to[1])
    if fmt not in TARGETS:
        raise UserError(f"export: --to {fmt!r} is not a format kvbench exports; choose one of {', '.join(TARGETS)}")
    results = _labelled(args.results)
    if fmt == "perfetto":
        return _perfetto(results, directory)
    done = export_tables(results, fmt, directory)
    for note in done.notes:
        print(f"kvbench: warning: {note}", file=sys.stderr)
    for path in done.written:
        print(path)
    return 0


def _perfetto(results: list[tuple[str, ResultDocument]], directory: Path) -> int:
    from kvbench_core.exports.perfetto import write_trace

    logs = []
    for label, result in results:
        log = result.io_log
        if not log:
            raise UserError(f"export: {label} has no I/O log: run it with output: {{io_log: FILE}} to draw its "
                            "commands")
        target = directory / f"{label}.perfetto.json"
        if target.exists():
            raise UserError(f"{target} exists; kvbench never overwrites a file it did not create")
        logs.append((Path(log), target, result.window or None))
    directory.mkdir(parents=True, exist_ok=True)
    for log, target, window in logs:
        count = write_trace(log, target, window)
        print(f"{target} ({count:,} commands; open it at ui.perfetto.dev)")
    return 0
