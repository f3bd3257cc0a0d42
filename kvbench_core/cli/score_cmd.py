"""``kvbench score``: score a measured I/O log against a kvio projection, or against LMCache's semantic trace.

The seed's ``kvio_validate``; kvbench calls it ``score`` because "validate" is what ``kvbench spec
validate`` does to a spec (docs/cli.md).  ``kvbench validate`` and ``score --plan`` (the projection's old
name) still work for one release.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from kvbench_core.cli.console import console, set_report_handler
from kvbench_core.cli.project_cmd import add_geometry_arguments, geometry_from, size_argument
from kvbench_core.cli.renamed import RenamedFlag, add_renamed_switch
from kvbench_core.contracts.errors import SpecError
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.kvio.gate import Thresholds, gate
from kvbench_core.kvio.manifest import Manifest
from kvbench_core.kvio.semantic import read_semantic
from kvbench_core.kvio.validate import MISMATCH_EXAMPLES, ValidationOptions, read_trace, validate, validate_expected

SHOWN_MISMATCHES = 5
FAILED_EXIT = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("score", help="score a measured I/O log against a kvio projection "
                                   "(exact-match, WAPE, size-distribution TV); exit 1 when a threshold is missed")
    expected = parser.add_mutually_exclusive_group(required=True)
    expected.add_argument("--projection", metavar="MANIFEST",
                          help="manifest (`kvbench project --record`) or projection JSON (`project --json`)")
    expected.add_argument("--plan", dest="projection", metavar="MANIFEST", action=RenamedFlag, new="--projection",
                          help=argparse.SUPPRESS)
    expected.add_argument("--semantic", help="LMCache's semantic trace (LMCACHE_KVIO_TRACE JSONL): score against "
                                             "what the engine meant to store/load, split by the geometry flags")
    parser.add_argument("--measured", "--tracer", dest="measured", required=True, metavar="IO_LOG",
                        help="the I/O log, one JSONL record per device command: `kvbench replay --io-log` or "
                             "the seed's eBPF nvme_uring_cmd_monitor (--tracer is the seed's spelling)")
    parser.add_argument("--nlb-bytes", type=int,
                        help="recompute the eBPF monitor's bytes as nlb × this (when its --lba-size was wrong)")
    add_geometry_arguments(parser)
    # The kvio seed's spellings: its --lba-bytes is the engine's block_align (kvbench's --align), its
    # --mdts-bytes the largest command (--max-transfer).
    parser.add_argument("--lba-bytes", dest="align", default=argparse.SUPPRESS,
                        help="the seed's name for --align (raw_block's block_align, e.g. 4096; not the device LBA)")
    parser.add_argument("--mdts-bytes", dest="max_transfer", default=argparse.SUPPRESS,
                        help="the seed's name for --max-transfer")
    parser.set_defaults(max_transfer=None, align=None, store_header_bytes=None)  # None: not given
    parser.add_argument("--ops", choices=("store", "load", "store,load"), metavar="OPS",
                        help="the ops the I/O log holds: store, load or store,load (default: those in it; an "
                             "expected op the log lacks then fails)")
    parser.add_argument("--offsets", action="store_true",
                        help="also score offsets: each object's commands tile one extent, loads read within it")
    parser.add_argument("--order", action="store_true",
                        help="also score order: ascending offsets within an object, objects in the expected order")
    add_renamed_switch(parser, "--check-offsets", "--offsets", dest="offsets")
    add_renamed_switch(parser, "--check-order", "--order", dest="order")
    parser.add_argument("--min-exact", type=float, default=100.0, metavar="PCT",
                        help="least exact-match, in %% of objects, overall and per op (default 100)")
    parser.add_argument("--max-wape", type=float, default=0.0, metavar="PCT", help="largest WAPE in %% (default 0)")
    parser.add_argument("--max-tv", type=float, default=0.0, help="largest size-distribution TV, 0..1 (default 0)")
    parser.epilog = ("The geometry flags apply to --semantic; a projection carries the geometry it was made with. "
                     "Exit status 1 when a threshold is missed.")
    set_report_handler(parser, build, render, "score report")


def _geometry(args: argparse.Namespace, manifest: Manifest | None) -> TransferGeometry:
    """The semantic trace's geometry from the flags; with a projection, a flag may only repeat its value."""
    given = {"max_transfer": args.max_transfer, "align": args.align, "store_header_bytes": args.store_header_bytes}
    if manifest is None:
        defaults = TransferGeometry()
        return geometry_from(argparse.Namespace(**{k: v if v is not None else str(getattr(defaults, k))
                                                   for k, v in given.items()}))
    made = manifest.geometry.to_dict()
    for name, value in given.items():
        if value is not None and size_argument(f"--{name.replace('_', '-')}", value) != made[name]:
            raise SpecError(f"--{name.replace('_', '-')} {value}: the projection was made with {name} {made[name]}; "
                            "a projection carries its geometry (project again with the flag, or leave it out)")
    return manifest.geometry


def build(args: argparse.Namespace) -> dict[str, Any]:
    options = ValidationOptions(ops=tuple(args.ops.split(",")) if args.ops else None,
                                check_offsets=args.offsets, check_order=args.order)
    thresholds = Thresholds(args.min_exact / 100, args.max_wape / 100, args.max_tv)
    measured = read_trace(args.measured, args.nlb_bytes, keep_extents=args.offsets or args.order)
    if args.semantic:
        semantic = read_semantic(args.semantic, _geometry(args, None))
        report = {"semantic": args.semantic, "measured": args.measured,
                  **validate_expected(semantic.expected, measured, source="semantic trace", options=options),
                  "components_bytes": dict(semantic.components)}
    else:
        manifest = Manifest.read(args.projection)
        _geometry(args, manifest)
        report = {"projection": args.projection, "measured": args.measured, **validate(manifest, measured, options)}
        hints = [missing_header_hint(report, manifest.geometry.store_header_bytes),
                 racing_order_hint(report, manifest.engine)]
        if any(hints):
            report["hints"] = [hint for hint in hints if hint]
    missed = gate(report, thresholds)
    report["gate"] = {"passed": not missed, "missed": missed, "thresholds": asdict(thresholds)}
    return report


def _line(label: str, scores: dict[str, Any]) -> str:
    exact, sizes = scores["exact_match"], scores["size_match"]
    wape = "n/a" if scores["wape"] is None else f"{scores['wape']:.4%}"
    return (f"{label}: exact-match {exact['matched']}/{exact['total']}, WAPE {wape}, "
            f"per-cmd size {sizes['matched']}/{sizes['total']}, size-dist TV {scores['tv_distance']:.4f}  "
            f"(commands {scores['commands']['measured']:,} measured / {scores['commands']['planned']:,} planned)")


def render(report: dict[str, Any]) -> int:
    """The scores, stores and loads each on their own line first; exit status 1 when the gate failed."""
    out = console()
    for line in (*_score_lines(report), *_trace_lines(report), *_mismatch_lines(report), *_check_lines(report)):
        out.print(line)
    verdict = report["gate"]
    for line in verdict["missed"]:
        out.print(f"[red]FAIL[/red] {line}")
    for hint in report.get("hints") or []:
        out.print(f"hint: {hint}")
    out.print("[green]PASS[/green]: every threshold met" if verdict["passed"] else
              f"{len(verdict['missed'])} threshold(s) missed (relax with --min-exact / --max-wape / --max-tv)")
    return 0 if verdict["passed"] else FAILED_EXIT


def _score_lines(report: dict[str, Any]) -> list[str]:
    """Per op, the ops missing, all together, per KV part, and the stored components' sizes."""
    lines = [_line(f"[bold]{op}[/bold]", scores) for op, scores in report["by_op"].items()]
    lines += [f"[bold]{op}[/bold]: none in the I/O log ({report['objects']} objects expected)"
              for op in report["ops_missing"]]
    lines.append(_line(f"all ({', '.join(report['ops_scored'])})", report))
    lines += [_line(f"  part {part}", scores) for part, scores in report.get("by_part", {}).items()]
    if report.get("components_bytes"):
        lines.append("stored components: " + ", ".join(f"{name} {size:,} B"
                                                       for name, size in sorted(report["components_bytes"].items())))
    return lines


def _trace_lines(report: dict[str, Any]) -> list[str]:
    """What of the I/O log was not scored: foreign trace ids, untagged commands, skipped lines."""
    lines = []
    foreign = report["unattributed"]
    if foreign["commands"]:
        lines.append(f"unattributed: {foreign['commands']:,} commands, {foreign['bytes']:,} B from "
                     f"{foreign['trace_ids']} trace id(s) not in the projection (counted as mispredicted)")
    if report["untagged_commands"]:
        lines.append(f"untagged (trace id 0) commands ignored: {report['untagged_commands']:,}")
    if report["skipped_lines"] or report["truncated_last_line"]:
        truncated = ", truncated last line" if report["truncated_last_line"] else ""
        lines.append(f"skipped lines (completions, metadata, other ops): {report['skipped_lines']:,}{truncated}")
    return lines


def _mismatch_lines(report: dict[str, Any]) -> list[str]:
    shown = report["mismatches"][:SHOWN_MISMATCHES]
    lines = [f"mismatch {mismatch['op']} {mismatch['key']} (trace {mismatch['trace_id']}): "
             f"planned {mismatch['planned']} measured {mismatch['measured']}" for mismatch in shown]
    wrong = report["exact_match"]["total"] - report["size_match"]["matched"]
    if wrong > len(shown):
        lines.append(f"… {wrong - len(shown)} more mismatching object ops (--json lists up to {MISMATCH_EXAMPLES})")
    return lines


def _check_lines(report: dict[str, Any]) -> list[str]:
    """The optional offset and order checks."""
    lines = [f"offsets: {name.replace('_', ' ')} {check['matched']}/{check['total']}"
             for name, check in (report.get("offsets") or {}).items() if name != "examples"]
    order = report.get("order")
    if order:
        within = order["ascending_within_object"]
        lines.append(f"order: ascending offsets within an object {within['matched']}/{within['total']}; "
                     + ", ".join(f"{op} objects {info['objects']} with {info['inversions']} inversions"
                                 for op, info in order["objects"].items()))
    return lines


def racing_order_hint(report: dict[str, Any], engine: dict[str, Any]) -> str | None:
    """Why the object order missed, when the projection's engine preset says that engine's stores race by
    default (LMCache 0.5 local_disk's 4 disk threads: the order check failed with them and passed with one)."""
    order, note = report.get("order"), engine.get("store_order_note")
    if not order or not note or not any(info["inversions"] for info in order["objects"].values()):
        return None
    return f"{note}; score a capture of the default settings without --order"


def missing_header_hint(report: dict[str, Any], header_bytes: int) -> str | None:
    """Why the stores missed, when every mismatching store is exactly the projection's header command short:
    the I/O log comes from a tier that writes no header before its payload (kvbench's own tiers; LMCache's
    raw_block writes one), and the projection should say so (a new user's first project -> replay -> score
    failed 6 thresholds for this alone)."""
    stores = [m for m in report.get("mismatches") or [] if m["op"] == "store"]
    if not header_bytes or not stores:
        return None
    for mismatch in stores:
        short = dict(mismatch["planned"])
        short[str(header_bytes)] = short.get(str(header_bytes), 0) - 1
        if {size: n for size, n in short.items() if n} != mismatch["measured"]:
            return None
    return (f"every mismatching store is exactly the projection's {header_bytes} B header command short: the I/O "
            "log comes from a tier that writes no header (kvbench's own do not); project with --store-header-bytes 0")
