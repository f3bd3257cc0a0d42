"""``kvbench check RESULT [--rules mlperf-v3]``: a result against its invariants or a submission checklist.

Every rule is listed as pass or fail with its reason; the exit status is 1
when any rule fails, so CI can gate on it.  Without ``--rules`` the default
rule set re-derives everything the result states (reports/rules.py,
``INVARIANTS``): format, schema, spec hash, every figure, a summary from its
trial files, the status, the invariants.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from kvbench_core.cli.console import console
from kvbench_core.reports.rules import RULESETS, check
from kvbench_core.results.document import ResultDocument, read_json
from kvbench_core.results.result import require_sections

FAILED_EXIT = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check", help="check a result against rules: its invariants or a submission rule set (exit 1 on a failure)")
    parser.add_argument("result", metavar="RESULT",
                        help="a result; preferably a trials summary (<name>-<id>-summary.json)")
    parser.add_argument("--rules", default="invariants", choices=sorted(RULESETS),
                        help="the rule set (default: invariants, which every rule set includes)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    # Read unchecked: a format or schema the document breaks is a rule's failure to report, not a refusal.
    data = read_json(args.result)
    require_sections(data, args.result, ("run", "spec", "metrics"))  # the one line every command says
    result = ResultDocument.unchecked(data, args.result)
    outcomes = check(result, args.rules, Path(args.result).parent)
    failed = sum(not o.passed for o in outcomes)
    if args.json:
        print(json.dumps({"rules": args.rules, "passed": not failed, "checks": [asdict(o) for o in outcomes]},
                         indent=2))
    else:
        table = Table("rule", "result", "reason", title=f"kvbench check --rules {args.rules}: {args.result}")
        for outcome in outcomes:
            table.add_row(outcome.rule, "[green]pass[/green]" if outcome.passed else "[red]FAIL[/red]",
                          outcome.reason)
        console().print(table)
        console().print(f"{len(outcomes) - failed} passed, {failed} failed")
    return FAILED_EXIT if failed else 0
