"""Block-trace any process the way a ``tracing: block`` run does, and distil the capture into an fio job.

``python -m kvbench_blktrace --pid PID --path DIR`` prints the bpftrace program of kvbench's block trace
as a run would start it (for an inference engine, fio, or to reproduce the test capture); run
it with ``bpftrace`` as root and stop it with Ctrl-C, keeping its output.
``python -m kvbench_blktrace fio CAPTURE`` turns that output into an fio job, as
``kvbench fio`` does for a result with a block trace.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvbench_blktrace.capture import CaptureError, capture_as_result
from kvbench_blktrace.devices import DeviceNotTraceable, devices_for
from kvbench_blktrace.parse import TraceOutputError
from kvbench_blktrace.program import build_program
from kvbench_core.contracts.units import parse_duration, parse_size
from kvbench_core.reports.fio import distill
from kvbench_core.results.document import ResultDocument


def program(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvbench_blktrace",
                                     description="Print the bpftrace program of kvbench's block trace.",
                                     epilog="python -m kvbench_blktrace fio --help: distil a capture into an fio job")
    parser.add_argument("--pid", type=int, required=True, help="process whose file syscalls are traced")
    parser.add_argument("--path", required=True, help="directory whose disk's block requests are traced")
    args = parser.parse_args(argv)
    try:
        devices = devices_for(args.path)
    except (OSError, DeviceNotTraceable) as error:
        print(f"kvbench_blktrace: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(build_program(args.pid, devices))
    return 0


def fio(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvbench_blktrace fio",
                                     description="Write an fio job reproducing a block-trace capture's block I/O.")
    parser.add_argument("capture", help="bpftrace's output of the program (stopped with Ctrl-C)")
    parser.add_argument("--name", default="capture", help="job name, e.g. the traced process (vllm)")
    parser.add_argument("--directory", default=".", help="where fio creates its files (default: .)")
    parser.add_argument("--runtime", help="run time, e.g. 300s (default: how long the capture ran)")
    parser.add_argument("--size", help="bytes the job spreads its I/O over (default: what the capture moved)")
    args = parser.parse_args(argv)
    try:
        runtime = parse_duration(args.runtime) if args.runtime is not None else None
        size = parse_size(args.size) if args.size is not None else None
        text = Path(args.capture).read_text()
        result = capture_as_result(text, name=args.name, directory=args.directory, runtime_s=runtime)
    except OSError as error:
        print(f"kvbench_blktrace: {args.capture}: {error.strerror or error}", file=sys.stderr)
        return 2
    except (ValueError, CaptureError, TraceOutputError) as error:
        print(f"kvbench_blktrace: {args.capture}: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(distill(ResultDocument.unchecked(result, args.capture), source="trace", size=size))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fio"]:
        return fio(argv[1:])
    return program(argv)


if __name__ == "__main__":
    sys.exit(main())
