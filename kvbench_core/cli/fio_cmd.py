"""``kvbench fio RESULT > job.fio``: an fio job that reproduces a run's I/O pattern (see docs/fio.md)."""

from __future__ import annotations

import argparse
import sys

from kvbench_core.cli.renamed import renamed_values
from kvbench_core.cli.result_files import read_documents
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import parse_duration, parse_size
from kvbench_core.reports.fio import distill

#: ``--source`` as spelled on the command line -> the distiller's name for it.  The distiller's "trace" is
#: the result's block trace; the command line says "block-trace" because "trace" alone also names
#: workload traces and the kvio I/O log (docs/cli.md).
DISTILLER_SOURCE = {"auto": "auto", "block-trace": "trace", "counters": "record"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fio", help="write an fio job reproducing a result's I/O (its block trace, else kvbench's per-tier counters)")
    parser.add_argument("result", help="kvbench result JSON")
    parser.add_argument("--size", help="bytes the job spreads its I/O over, all jobs together (e.g. 64GiB; "
                                       "default: what the run moved, at most the tier's capacity)")
    parser.add_argument("--directory", help="where fio creates its files (default: the run's cache directory)")
    parser.add_argument("--runtime", help="run time, e.g. 300s (default: the run's measured window)")
    parser.add_argument("--source", choices=tuple(DISTILLER_SOURCE), default="auto",
                        type=renamed_values("fio --source", {"trace": "block-trace", "record": "counters"}),
                        help="block-trace: the result's block_trace section; counters: kvbench's per-tier "
                             "counters; auto (default): the block trace when the run has one")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        size = parse_size(args.size) if args.size is not None else None
        runtime = parse_duration(args.runtime) if args.runtime is not None else None
    except ValueError as error:
        raise SpecError(f"kvbench fio: {error}") from None
    if size == 0:
        raise SpecError("kvbench fio: --size must be more than 0 bytes (the span fio spreads its I/O over)")
    (document,) = read_documents([args.result], ("run", "spec"))
    job = distill(document, source=DISTILLER_SOURCE[args.source], size=size, directory=args.directory,
                  runtime_s=None if runtime is None else max(1, round(runtime)))
    sys.stdout.write(job)
    return 0
