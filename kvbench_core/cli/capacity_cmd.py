"""``kvbench capacity SPEC``: the highest load at which every QoS class meets its SLA, with its 95 % CI.

One run of the spec with the ``sla_search`` autoscaler (docs/autoscaling.md): users double while every
judged step is within the SLA, then bisect; the run's measured window is the budget, less warm-up and the
drain limit, so the search cannot outlast ``--budget``.  The plan is printed first (what the budget holds),
then the answer, then the step table; ``--json`` prints one JSON document instead.  ``--repeats N`` runs N
searches in a row, each on an N-th of the budget, and adds the interval the next search lands in
(capacity/repeats.py): what the machine moves between searches, which one search cannot see.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvbench_core.builtins.sla_search import OPEN_LOOP_CEILING
from kvbench_core.capacity.interval import KEYS
from kvbench_core.capacity.repeats import RepeatedAnswer
from kvbench_core.capacity.search import steps_needed
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import parse_duration
from kvbench_core.reports.capacity import answer_line, capacity_of, curve_lines
from kvbench_core.results.document import ResultDocument
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.plan import RunPlan, autoscaler_ceiling
from kvbench_core.runspec.rerun import OVERRIDE_FLAG
from kvbench_core.scaleout.session import run_session

DEFAULT_BUDGET = "10m"
#: The drain may take this share of the budget (at most 30 s, at least 1 s): what is in flight at the end.
DRAIN_SHARE = 0.05


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("capacity", help="search the most users every QoS class's SLA holds for")
    parser.add_argument("spec", help="run spec YAML (its users are where the search starts)")
    parser.add_argument("--budget", default=DEFAULT_BUDGET,
                        help=f"the search's whole time: warm-up + steps + drain (default {DEFAULT_BUDGET}); "
                             "with --repeats, all the searches' together")
    parser.add_argument("--repeats", type=int, default=1,
                        help="searches in a row, each on its share of the budget; from 2 on, the answer adds the "
                             "interval the next search lands in (default 1)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a spec field, as kvbench run does")
    parser.add_argument("--max-users", type=int, help="never more users than this (default 64 x the spec's, "
                                                      "at least 1024)")
    parser.add_argument("--step", default="5s", help="a step's shortest length, and how often it is looked at")
    parser.add_argument("--max-step", default="60s", help="a step without its requests after this is over")
    parser.add_argument("--min-requests", type=int, default=20,
                        help="completed requests every class needs before a step is judged (default 20)")
    parser.add_argument("--resolution", type=float, default=0.05,
                        help="stop when the bracket is at most this share of its lower end (default 0.05)")
    parser.add_argument("--output", help="shorthand for --set output.directory=DIR")
    parser.add_argument("--json", action="store_true", help="print the answer and steps as JSON (no progress)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no live progress")
    parser.add_argument(OVERRIDE_FLAG, dest="accept_edited", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(handler=handle)


def _seconds(flag: str, text: str) -> float:
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text)
    except ValueError as error:
        raise SpecError(f"{flag} {text}: {error}") from None


def handle(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        raise SpecError(f"--repeats {args.repeats}: at least 1 search")
    budget = _seconds("--budget", args.budget) / args.repeats
    as_written, plan, lines = _search_plan(args, budget)
    out = sys.stderr if args.json else sys.stdout
    print("\n".join(lines), file=out)
    answers: list[dict[str, Any]] = []
    code = 0
    for index in range(args.repeats):
        if args.repeats > 1 and not args.json:
            print(f"search {index + 1} of {args.repeats}")
        outcome = run_session(as_written, plan, quiet=args.quiet or args.json)
        if not outcome.writer:
            return outcome.exit_code
        result = outcome.results[0] if outcome.results else None  # the search's one run
        path = str(outcome.paths[0]) if outcome.paths else None
        answers.append(json_answer(result, path, budget))
        if not args.json:
            _print_answer(result, path, outcome.reports)
        if outcome.error is not None:
            print(outcome.error.line(), file=sys.stderr)
        code = code or outcome.exit_code
    _print_repeated(answers, as_json=args.json)
    return code


def _search_plan(args: argparse.Namespace, budget: float) -> tuple[str, RunPlan, list[str]]:
    """The spec with the search in it, for one search of ``budget`` seconds, and the plan's lines."""
    step_s, max_step_s = _seconds("--step", args.step), _seconds("--max-step", args.max_step)
    overrides = list(args.overrides) + ([f"output.directory={args.output}"] if args.output else [])
    # The budget sets the duration: the spec's own (or none, where it gives requests) is not the search's.
    _, plan = load_plan(args.spec, [*overrides, f"duration={budget!r}"], accept_edited=args.accept_edited)
    _refuse_what_cannot_search(plan)
    replaced = None if plan.autoscaler is None else plan.autoscaler.choice.name
    warmup = plan.window.warmup_s
    drain = min(30.0, max(1.0, DRAIN_SHARE * budget))
    search_s = budget - warmup - drain
    if search_s < 2 * step_s:
        share = f" ({budget:g} s for each of {args.repeats} searches)" if args.repeats > 1 else ""
        raise SpecError(f"--budget {args.budget}{share}: leaves {max(search_s, 0):g} s for the search after warm-up "
                        f"{warmup:g} s and the drain limit {drain:g} s; it needs at least two steps of {step_s:g} s")
    autoscaler = {"name": "sla_search", "stop_when_converged": True,
                  "options": {"interval_s": step_s, "max_step_s": max_step_s, "min_requests": args.min_requests,
                              "resolution": args.resolution}}
    if args.max_users:
        autoscaler["max_users"] = args.max_users
    search = [f"autoscaler={json.dumps(autoscaler)}", f"duration={search_s!r}", f"drain_timeout={drain!r}"]
    as_written, plan = load_plan(args.spec, overrides + search, accept_edited=args.accept_edited)
    lines = plan_lines(plan, budget=budget, warmup=warmup, search_s=search_s, drain=drain, replaced=replaced)
    if args.repeats > 1:
        lines.append(f"  {args.repeats} searches in a row, {budget:g} s each")
    return as_written, plan, lines


def _print_repeated(answers: list[dict[str, Any]], *, as_json: bool) -> None:
    """One search: its JSON (the answer is already printed otherwise).  Several: the next search's interval
    last, and in the JSON above the searches' own records."""
    repeated = repeated_answer(answers) if len(answers) > 1 else None
    if as_json:
        print(json.dumps(answers[0] if len(answers) == 1 else {**(repeated or {}), "searches": answers}, indent=2))
    elif repeated is not None:
        print(repeated["line"])
    elif len(answers) > 1:
        print("max users within SLA over the searches: no interval (fewer than two searches found an answer)")


def repeated_answer(answers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The searches' mean answer and the next search's interval, where two or more found one; None else."""
    kind = (answers[0].get("load_kind") if answers else None) or "users"
    found = [a for a in answers if a.get(KEYS[kind]) is not None and None not in (a.get("ci95") or [None])]
    if len(found) < 2:
        return None
    repeated = RepeatedAnswer.of([a[KEYS[kind]] for a in found], [tuple(a["ci95"]) for a in found])
    return {**repeated.as_dict(kind), "line": repeated.line(kind), "searches_with_an_answer": len(found)}


def _print_answer(result: ResultDocument | None, path: str | None, reports: list[Any]) -> None:
    """The answer, the capacity curve, the run's status, and where the result and reports are."""
    print(answer_line(result) if result is not None and capacity_of(result) else "max users within SLA: no "
          "answer (the run ended before its first step was judged)")
    for line in curve_lines(result) if result is not None else []:
        print(f"  {line}")
    if result is not None:
        print(f"run [{result.run.status}] {result.run.stop_reason}")
    if path:
        print(f"result: {path}")
    for report in reports:
        print(f"report: {report}")


def _refuse_what_cannot_search(plan: RunPlan) -> None:
    """One line for a spec the search cannot honestly run: the reason names the field."""
    if plan.clients > 1 or plan.trials > 1:
        raise SpecError("capacity searches one client's users in one run: clients and trials must be 1 "
                        f"(clients {plan.clients}, trials {plan.trials})")
    if plan.window.request_limit is not None:
        raise SpecError(f"requests: {plan.window.request_limit} would end the search after that many requests; "
                        "remove it (the budget bounds the search)")


def open_loop(plan: RunPlan) -> bool:
    """Whether the spec's load is an arrival rate: poisson synthetic arrivals, or a timestamped trace."""
    source = plan.workload.source
    arrival = (source.options.get("arrival") or {}) if source.name == "synthetic" else {}
    return arrival.get("process") == "poisson" or bool(getattr(source.cls, "open_loop", False))


def plan_lines(plan: RunPlan, *, budget: float, warmup: float, search_s: float, drain: float,
               replaced: str | None) -> list[str]:
    """What the search will do and what the budget holds, before anything runs."""
    assert plan.autoscaler is not None
    options = plan.autoscaler.choice.options
    if open_loop(plan):
        kind, unit, start, ceiling = "open loop (arrival rate, in % of the spec's)", "%", 100, 100 * OPEN_LOOP_CEILING
    else:
        kind, unit = "closed loop (users)", " users"
        start, ceiling = plan.workload.users, autoscaler_ceiling(plan.autoscaler, plan.workload.users)
    steps = steps_needed(start, ceiling, float(options["resolution"]))
    shortest = steps * float(options["interval_s"])
    fits = "fits" if shortest <= search_s else "does NOT fit: the answer may be a bracket"
    sla = ", ".join(f"{name} {c.p95_target_s * 1000:,.0f} ms" for name, c in plan.qos.items())
    lines = [f"capacity search: {plan.spec.get('name') or 'run'}, {kind}",
             f"  budget {budget:g} s = warm-up {warmup:g} s + search {search_s:g} s + drain limit {drain:g} s "
             "(set-up, preload and clean-up come on top)",
             f"  doubling from {start}{unit}, then bisection to {float(options['resolution']):.0%} "
             f"(at least 1{unit.rstrip('s')}), at most {ceiling}{unit}",
             f"  each step: at least {float(options['interval_s']):g} s and until every QoS class has "
             f"{options['min_requests']} completed requests; over the SLA if not after "
             f"{float(options['max_step_s']):g} s",
             f"  at most {steps} steps: {shortest:g} s at the shortest step length, {fits}",
             f"  SLA, service p95: {sla}"]
    if replaced:
        lines.append(f"  the spec's autoscaler ({replaced}) is replaced by the search")
    return lines


def json_answer(result: ResultDocument | None, path: str | None, budget: float) -> dict[str, Any]:
    """The answer for scripts: the figures of the summary, the steps without their histograms."""
    summary = (capacity_of(result) if result is not None else None) or {}
    keep = ("load_kind", "max_users_within_sla", "max_arrival_rate_percent_within_sla", "ci95", "at_least",
            "limited_by", "confidence", "method", "drift", "repeated_loads", "search_finished", "bracket",
            "judged_steps")
    return {**{key: summary[key] for key in keep if key in summary}, "budget_s": budget,
            "status": result.run.status if result is not None else None, "result": path,
            "steps": [{k: v for k, v in step.items() if k != "histograms"} for step in summary.get("steps") or []]}
