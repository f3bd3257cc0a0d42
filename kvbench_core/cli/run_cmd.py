"""``kvbench run SPEC``: run a spec (or re-run the spec a result carries) and write its result."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kvbench_core.session import run_session
from kvbench_core.spec import load_spec


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run a spec (YAML) or re-run a result's spec (JSON)")
    parser.add_argument("spec", help="run spec YAML, or a kvbench result JSON to re-run exactly")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a spec field, e.g. --set workload.users=20 --set duration=10s")
    parser.add_argument("--trials", type=int, help="shorthand for --set trials=N")
    parser.add_argument("--output", help="shorthand for --set output.directory=DIR")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    if args.trials is not None:
        overrides.append(f"trials={args.trials}")
    if args.output is not None:
        overrides.append(f"output.directory={args.output}")
    as_written, spec = load_spec(args.spec, overrides)
    outcome = run_session(as_written, spec, quiet=args.quiet)
    for result, path in zip(outcome.results, outcome.paths, strict=True):
        print(summarize(result))
        print(f"result: {path}")
    if outcome.error is not None:
        print(f"kvbench: error: {outcome.error}", file=sys.stderr)
    return outcome.exit_code


def summarize(result: dict[str, Any]) -> str:
    """A short human summary of one result (the JSON holds everything)."""
    run = result["run"]
    metrics = result.get("metrics") or {}
    head = metrics.get("headline") or {}
    lines = [f"{run['name'] or 'run'} [{run['status']}] {run['stop_reason']}"]
    if head:
        window = metrics["window"]["measured_s"]
        lines.append(f"  requests {head['requests_completed']} in {window:.1f}s; "
                     f"{_fmt(head['avg_throughput_tokens_per_sec'])} tok/s wall-clock, "
                     f"e2e p95 {_fmt(head['end_to_end_latency_p95_ms'])} ms, "
                     f"cache hit rate {_fmt(head['cache_hit_rate'])}")
        for name, tier in metrics["tiers"].items():
            read, write = tier["read"], tier["write"]
            lines.append(
                f"  {name:<10} read {read['bytes'] / 1e9:8.3f} GB @ {_bw(read)}  "
                f"write {write['bytes'] / 1e9:8.3f} GB @ {_bw(write)}  "
                f"read p95 {_fmt(read['latency_ms']['total']['p95'])} ms "
                f"(device {_fmt(read['latency_ms']['device']['p95'])})  "
                f"write p95 {_fmt(write['latency_ms']['total']['p95'])} ms "
                f"(device {_fmt(write['latency_ms']['device']['p95'])})")
    return "\n".join(lines)


def _bw(op: dict[str, Any]) -> str:
    value = op.get("bandwidth_bytes_per_s")
    return "   -    " if not value else f"{value / 1e9:5.2f} GB/s"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)
