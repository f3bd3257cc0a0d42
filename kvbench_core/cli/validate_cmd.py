"""``kvbench validate``: score a measured command trace against a kvio plan, or LMCache's semantic trace."""

from __future__ import annotations

import argparse
from typing import Any

from kvbench_core.cli.console import console, set_report_handler
from kvbench_core.cli.plan_cmd import add_geometry_arguments, geometry_from
from kvbench_core.kvio.manifest import Manifest
from kvbench_core.kvio.semantic import read_semantic
from kvbench_core.kvio.validate import MISMATCH_EXAMPLES, read_trace, validate, validate_expected

SHOWN_MISMATCHES = 5


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help="score a measured I/O trace against a kvio plan "
                                   "(exact-match, WAPE, size-distribution TV)")
    expected = parser.add_mutually_exclusive_group(required=True)
    expected.add_argument("--plan", help="manifest (`kvbench plan --record`) or plan JSON (`--json`)")
    expected.add_argument("--semantic", help="LMCache's semantic trace (LMCACHE_KVIO_TRACE JSONL): validate against "
                                             "what the engine meant to store/load, split by the geometry flags")
    parser.add_argument("--measured", required=True,
                        help="JSONL trace: `kvbench replay --io-log` or the eBPF nvme_uring_cmd_monitor")
    parser.add_argument("--lba-bytes", type=int,
                        help="recompute tracer bytes as nlb × this (when the capture's --lba-size was wrong)")
    add_geometry_arguments(parser)
    parser.epilog = "The geometry flags apply to --semantic; a plan carries the geometry it was made with."
    set_report_handler(parser, build, render, "validation report")


def build(args: argparse.Namespace) -> dict[str, Any]:
    measured = read_trace(args.measured, args.lba_bytes)
    if args.semantic:
        semantic = read_semantic(args.semantic, geometry_from(args))
        report = validate_expected(semantic.expected, measured, source="semantic trace")
        return {"semantic": args.semantic, "measured": args.measured, **report,
                "components_bytes": dict(semantic.components)}
    report = validate(Manifest.read(args.plan), measured)
    return {"plan": args.plan, "measured": args.measured, **report}


def _line(label: str, scores: dict[str, Any]) -> str:
    exact, sizes = scores["exact_match"], scores["size_match"]
    wape = "n/a" if scores["wape"] is None else f"{scores['wape']:.4%}"
    return (f"{label}: exact-match {exact['matched']}/{exact['total']}, WAPE {wape}, "
            f"per-cmd size {sizes['matched']}/{sizes['total']}, size-dist TV {scores['tv_distance']:.4f}  "
            f"(commands {scores['commands']['measured']:,} measured / {scores['commands']['planned']:,} planned)")


def render(report: dict[str, Any]) -> None:
    out = console()
    out.print(_line(f"[bold]all ({', '.join(report['ops_scored'])})[/bold]", report))
    for op, scores in report["by_op"].items():
        out.print(_line(f"  {op}", scores))
    for part, scores in report.get("by_part", {}).items():
        out.print(_line(f"  part {part}", scores))
    if report.get("components_bytes"):
        out.print("stored components: " + ", ".join(f"{name} {size:,} B"
                                                    for name, size in sorted(report["components_bytes"].items())))
    foreign = report["unattributed"]
    if foreign["commands"]:
        out.print(f"unattributed: {foreign['commands']:,} commands, {foreign['bytes']:,} B from "
                  f"{foreign['trace_ids']} trace id(s) not in the plan (counted as mispredicted)")
    if report["untagged_commands"]:
        out.print(f"untagged (trace id 0) commands ignored: {report['untagged_commands']:,}")
    if report["skipped_lines"] or report["truncated_last_line"]:
        truncated = ", truncated last line" if report["truncated_last_line"] else ""
        out.print(f"skipped lines (completions, metadata, other ops): {report['skipped_lines']:,}{truncated}")
    shown = report["mismatches"][:SHOWN_MISMATCHES]
    for mismatch in shown:
        out.print(f"mismatch {mismatch['op']} {mismatch['key']} (trace {mismatch['trace_id']}): "
                  f"planned {mismatch['planned']} measured {mismatch['measured']}")
    wrong = report["exact_match"]["total"] - report["size_match"]["matched"]
    if wrong > len(shown):
        out.print(f"… {wrong - len(shown)} more mismatching object ops (--json lists up to {MISMATCH_EXAMPLES})")
