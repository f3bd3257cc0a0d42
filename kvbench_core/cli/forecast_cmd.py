"""``kvbench forecast RESULT``: what a measured run says about another load or tier set-up (docs/FORECAST.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvbench_core.contracts.errors import ForecastRefused
from kvbench_core.forecast.forecast import Forecaster, measured_figures
from kvbench_core.forecast.search import max_users_within_sla

#: The search's ceiling when --max-users is not given: as ``kvbench capacity``'s, 64 x the start.
SEARCH_REACH = 64


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("forecast", help="simulate a measured result at another load or tier set-up")
    parser.add_argument("result", help="a kvbench result JSON: its spec and the tier figures the models fit")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="change the run's spec, as kvbench run does (workload.users=5000, duration=300s)")
    parser.add_argument("--tier", dest="tiers", action="append", default=[], metavar="NAME.KNOB=VALUE",
                        help="NAME.bandwidth=xN (N times as fast) or NAME.capacity=SIZE|xN")
    parser.add_argument("--clients", type=int, help="clients sharing the persistent tiers (default: the run's)")
    parser.add_argument("--search", action="store_true", help="also search the max users within SLA")
    parser.add_argument("--max-users", type=int, help=f"the search's ceiling (default {SEARCH_REACH} x the users)")
    parser.add_argument("--json", action="store_true", help="print the forecast as one JSON document")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.clients is not None and args.clients < 1:
        raise ForecastRefused(f"forecast: --clients {args.clients}: at least 1")
    forecaster = Forecaster(args.result)
    figures = forecaster.forecast(args.overrides, args.tiers, args.clients)
    document: dict[str, Any] = {"result": args.result, "overrides": args.overrides, "tiers_changed": args.tiers,
                                "forecast": figures, "measured": measured_figures(forecaster.result)}
    if args.search:
        start = max(1, figures["users"])
        document["search"] = max_users_within_sla(forecaster, args.overrides, args.tiers, args.clients, start,
                                                  ceiling=args.max_users or SEARCH_REACH * start)
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        print("\n".join(summary_lines(document)))
    return 0


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The forecast in words: the load, each class against its SLA, throughput, bandwidth, uncertainty."""
    f = document["forecast"]
    lines = [f"forecast of {document['result']}: {f['users']} users, {f['clients']} client(s)"
             + (f"; {', '.join(document['overrides'] + document['tiers_changed'])}"
                if document["overrides"] or document["tiers_changed"] else ""),
             f"  simulated {f['window_s']:g} s in {f['wall_s']:.2f} s: {f['requests_completed']} requests, "
             f"{f['requests_per_s']:.3f} req/s, {f['tokens_per_s']:,.0f} tok/s, cache hit rate "
             f"{_num(f['cache_hit_rate'])}, queue wait p95 {_num(f['queue_wait_p95_ms'])} ms"]
    for name, q in f["qos"].items():
        if not q["requests"]:
            continue
        verdict = {True: "met", False: "MISSED", None: "not judged"}[q["sla_met"]]
        ci = q["service_p95_ci95_ms"]
        interval = f" (95 % CI {ci[0]:.1f}-{ci[1]:.1f})" if ci else " (too few requests for an interval)"
        lines.append(f"  {name}: {q['requests']} requests, service p95 {q['service_p95_ms']:.1f} ms{interval} "
                     f"/ SLA {q['sla_p95_ms']:g} ms, p99 {q['service_p99_ms']:.1f} ms: {verdict}")
    for tier, ops in f["tiers"].items():
        lines.append(f"  {tier}: read {ops.get('read', 0):.3f} GB/s, write {ops.get('write', 0):.3f} GB/s")
    if "search" in document:
        s = document["search"]
        answer = f"at least {s['max_users_within_sla']}" if s["at_least"] else str(s["max_users_within_sla"])
        lines.append(f"max users within SLA (forecast): {answer} ({s['bracket']}, {len(s['steps'])} simulated "
                     "loads)" + (f"; stopped: {s['refused']}" if s["refused"] else ""))
    lines += [f"  past the measurement: {line}" for line in f["beyond_measured"]]
    fitted = ", ".join(f"{tier} {op} {m['ops']}" for tier, ops in f["fit"].items() for op, m in ops.items())
    lines.append(f"  fitted from measured operations: {fitted}; each tier no faster than measured at the "
                 "measured concurrency (docs/FORECAST.md)")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
