"""``kvbench replay``: reissue a recorded KV object set on one tier (store all, then load all) and time it."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from kvbench_core.cli.console import console, set_report_handler
from kvbench_core.contracts.units import format_bytes
from kvbench_core.kvio.manifest import Manifest
from kvbench_core.kvio.replay import ReplaySettings, replay, tier_from_argument


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("replay", help="replay a kvio manifest on a tier: store all, then load all")
    parser.add_argument("manifest", help="manifest from `kvbench project --record` (or a projection JSON)")
    parser.add_argument("--tier", required=True,
                        help="inline tier such as '{backend: nvme, options: {path: /mnt/kv, direct: true}}', "
                             "or a run spec whose first non-memory tier is used")
    parser.add_argument("--iters", type=int, default=1, help="measured passes (default 1)")
    parser.add_argument("--warmup", type=int, default=0, help="unmeasured passes first (default 0)")
    parser.add_argument("--concurrency", type=int, default=1, help="objects in flight (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="payload seed (default 0)")
    parser.add_argument("--io-log", metavar="IO_LOG", help="log every device command of the first measured pass "
                        "(JSONL, joined by trace id) for `kvbench score`")
    parser.add_argument("--diskstats", action="store_true",
                        help="compare the projection with the device's /proc/diskstats deltas")
    parser.add_argument("--prefill-tokens-per-sec", type=float,
                        help="prefill rate R: say whether the measured loads beat recomputing")
    set_report_handler(parser, build, render, "replay report")


def build(args: argparse.Namespace) -> dict[str, Any]:
    manifest = Manifest.read(args.manifest)
    tier, where = tier_from_argument(args.tier)
    settings = ReplaySettings(iters=args.iters, warmup=args.warmup, concurrency=args.concurrency, seed=args.seed,
                              io_log=args.io_log, diskstats=args.diskstats,
                              prefill_tokens_per_sec=args.prefill_tokens_per_sec)
    return replay(manifest, tier, settings, where=where)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{format_bytes(value)}/s"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def render(report: dict[str, Any]) -> None:
    out = console()
    tier = report["tier"]
    out.print(f"[bold]{report['model'].get('name', '?')}[/bold] on {tier.get('backend')} "
              f"({tier.get('access_mechanism', tier.get('medium', ''))})")
    table = Table("pass", "op", "objects", "bytes", "throughput", "p50 ms", "p99 ms", "max ms", "tier cmds",
                  title="store all, then load all (per-object latency)")
    rows = [(str(it["iteration"]), it) for it in report["iterations"]] + [("all", report["overall"])]
    for label, result in rows:
        for op in ("store", "load"):
            r = result[op]
            lat = r["latency_ms"]
            commands = r.get("tier_commands", r.get("planned_commands_per_pass"))
            table.add_row(label, op, str(r["objects"]), format_bytes(r["bytes"]), _rate(r["throughput_bytes_per_s"]),
                          f"{lat['p50']:.3f}", f"{lat['p99']:.3f}", f"{lat['max']:.3f}",
                          f"{commands:,}" if label != "all" else f"projected {commands:,}/pass")
    out.print(table)
    if "load_vs_recompute" in report:
        recompute = report["load_vs_recompute"]
        for row in recompute["classes"]:
            out.print(f"load vs recompute ({format_bytes(row['payload_bytes'])}, {row['tokens']} tokens): "
                      f"load p50 {_ms(row['load_s_p50'])} ms = {_rate(row['measured_bytes_per_s'])} vs "
                      f"break-even {_rate(row['breakeven_bytes_per_s'])} "
                      f"(recompute {_ms(row['recompute_s'])} ms) -> [bold]{row['faster']}[/bold] is faster "
                      f"(load/recompute {row['load_to_recompute']:.2f}×)")
    if "diskstats" in report:
        render_diskstats(report["diskstats"])
    for warning in report["warnings"]:
        out.print(f"[yellow]warning:[/yellow] {warning}")


def render_diskstats(disk: dict[str, Any]) -> None:
    out = console()
    if not disk["available"]:
        out.print(f"diskstats: not available: {disk['reason']}")
        return
    max_io = disk["max_io_bytes"]
    table = Table("", "planned bytes", "device bytes", "ratio", "planned cmds", "expected requests",
                  "device requests + merges", "agree",
                  title=f"diskstats on {disk['device']} (max request {format_bytes(max_io) if max_io else '?'})")
    for direction in ("write", "read"):
        d = disk[direction]
        ratio = "-" if d["bytes_ratio"] is None else f"{d['bytes_ratio']:.4f}"
        agree = f"bytes {'yes' if d['bytes_agree'] else 'no'}, requests {'yes' if d['requests_agree'] else 'no'}"
        table.add_row(direction, f"{d['planned_bytes']:,}", f"{d['device_bytes']:,}", ratio,
                      f"{d['planned_commands']:,}", f"{d['expected_requests']:,}",
                      f"{d['device_requests']:,} + {d['device_merges']:,}", agree)
    out.print(table)
    for note in disk["notes"]:
        out.print(f"note: {note}")
