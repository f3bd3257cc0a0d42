"""``kvbench workload stats FILE``: what a workload trace holds, as a run would replay it.

The plugin contributes this command through the ``kvbench_cli_commands`` hook, so
the core CLI knows nothing of workload trace formats.  The figures are the ones the sources
put into every result that used the trace (``kvbench_workloads.survey``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from kvbench_core.contracts.errors import SpecError
from kvbench_workloads.survey import trace_stats

FORMATS = ("sharegpt", "burstgpt", "mooncake")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("workload", help="inspect workload trace files (ShareGPT, BurstGPT, Mooncake)")
    commands = parser.add_subparsers(dest="workload_command", metavar="COMMAND")
    stats = commands.add_parser(
        "stats", help="request count, input/output lengths, conversations, prefix reuse, inter-arrival times",
    )
    stats.add_argument("file", help="workload trace file, or a directory of them (one format)")
    stats.add_argument("--format", choices=FORMATS,
                       help="workload trace format (default: from the file name or content)")
    stats.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                       help="source option as in a spec's workload.options, YAML value (e.g. -o models=[GPT-4])")
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    stats.set_defaults(handler=handle_stats)
    parser.set_defaults(handler=lambda _args: parser.print_help() or 2)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--option {pair!r}: expected KEY=VALUE, e.g. skip_failed=false")
        try:
            options[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise SpecError(f"--option {pair!r}: value is not valid YAML ({error})") from None
    return options


def handle_stats(args: argparse.Namespace) -> int:
    figures = trace_stats(args.file, args.format, parse_options(args.option))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(render(figures))
    return 0


def _distribution(values: dict[str, float] | None) -> str:
    if not values:
        return "-"
    return "  ".join(f"{name} {value:g}" for name, value in values.items())


def render(figures: dict[str, Any]) -> str:
    """The figures as an aligned text block."""
    stats = figures["stats"]
    reuse = stats["prefix_reuse_rate"]
    reuse_text = f"tokens {reuse['by_tokens']:.1%}"
    if reuse["by_blocks"] is not None:
        reuse_text += f"  blocks {reuse['by_blocks']:.1%}"
    turns = stats["turns_per_conversation"]
    rows = [
        ("source", figures["source"] + (f" (tokens: {figures['count_tokens']})" if "count_tokens" in figures else "")),
        *(("file", f"{item['path']}  sha256 {item['sha256']}") for item in figures["files"]),
        ("requests", str(stats["requests"])),
        ("conversations", f"{stats['conversations']} ({stats['multi_turn_conversations']} multi-turn"
                          + (f", mean {turns['mean']:g} / max {turns['max']} turns" if turns else "") + ")"),
        ("single requests", str(stats["single_requests"])),
        ("input tokens", _distribution(stats["input_tokens"])),
        ("output tokens", _distribution(stats["output_tokens"])),
        ("prefix reuse", reuse_text),
        ("span (s)", "-" if stats["span_s"] is None else f"{stats['span_s']:g}"),
        ("inter-arrival (s)", _distribution(stats["inter_arrival_s"])),
        ("skipped", ", ".join(f"{reason} {count}" for reason, count in stats["skipped"].items()) or "none"),
        *(("bad row", example) for example in stats.get("bad_row_examples", [])),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
