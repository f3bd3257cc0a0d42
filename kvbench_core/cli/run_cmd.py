"""``kvbench run SPEC``: run a spec (or re-run the spec a result carries) and write its result.

With ``trials: N`` every trial writes its own result and a ``-summary.json``
holds the medians; with ``clients: N`` (or under ``mpirun``) one merged
result covers every client.  ``output.formats`` adds xlsx/png next to each
JSON.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from kvbench_core.codecs.figures import codec_line
from kvbench_core.contracts.units import format_bytes
from kvbench_core.engine.run.dryrun import dry_run_estimate
from kvbench_core.exports.live_metrics import require_metrics
from kvbench_core.reports import require_formats
from kvbench_core.reports.capacity import answer_line
from kvbench_core.reports.status_words import has_figures, status_reason
from kvbench_core.reports.verdicts import explain, starved_classes
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.invariants import attention_lines
from kvbench_core.results.merge import plural
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.rerun import OVERRIDE_FLAG
from kvbench_core.scaleout.multiclient import local_client_plans
from kvbench_core.scaleout.session import run_session


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run a spec (YAML) or re-run a result's spec (JSON)")
    parser.add_argument("spec", help="run spec YAML, or a kvbench result JSON to re-run exactly")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a spec field, e.g. --set workload.users=20 --set cache.tiers[1].capacity=8GiB")
    parser.add_argument("--trials", type=int, help="shorthand for --set trials=N")
    parser.add_argument("--clients", type=int, help="shorthand for --set clients=N (N local client processes)")
    parser.add_argument("--output", help="shorthand for --set output.directory=DIR")
    parser.add_argument("-q", "--quiet", action="store_true", help="no live progress (the summary still prints)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print the run plan before running and every tier's latency percentiles after")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 when the run ends degraded or inconclusive (as output.exit_zero: true); a "
                             "failed or interrupted run keeps its exit code (docs/results.md)")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate, resolve and print the run plan (entry sizes, tier capacities in entries, "
                             "offered bytes/s) without touching any storage")
    parser.add_argument(OVERRIDE_FLAG, dest="accept_edited", action="store_true",
                        help="re-run a result whose embedded spec fails its sha256 or format check; the new "
                             "result records the edit under run.rerun_of")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    for field, value in (("trials", args.trials), ("clients", args.clients), ("output.directory", args.output)):
        if value is not None:
            overrides.append(f"{field}={value}")
    as_written, plan = load_plan(args.spec, overrides, accept_edited=args.accept_edited)
    if args.dry_run or args.verbose:
        require_formats(list(plan.output.formats))  # as run_session does first: the dry run refuses what it would
        require_metrics(plan.output.metrics)
        clients = local_client_plans(plan) if plan.clients > 1 else ()
        print(render_plan(plan.spec, dry_run_estimate(plan, clients), dry_run=args.dry_run))
        if args.dry_run:
            return 0
    outcome = run_session(as_written, plan, quiet=args.quiet, exit_zero=args.exit_zero)
    if not outcome.writer:  # an MPI rank other than 0: rank 0 reports for everyone
        return outcome.exit_code
    for result, path in zip(outcome.results, outcome.paths, strict=True):
        print(summarize(result))
        for line in outcome.deletions.get(result.run.id, []):  # finished after the result was written
            print(f"  cleanup: {line}")
        if args.verbose:
            print(tier_percentiles(result))
        print(f"result: {path}")
    if outcome.summary is not None:
        print(summarize_trials(outcome.summary))
        print(f"summary: {outcome.summary_path}")
    for path in outcome.reports:
        print(f"report: {path}")
    if outcome.exit_zero:  # asked for: the status still says what happened, as a warning
        print(f"kvbench: warning: {outcome.error} (exit 0: --exit-zero / output.exit_zero)", file=sys.stderr)
    elif outcome.error is not None:
        print(outcome.error.line(), file=sys.stderr)
    return outcome.exit_code


def summarize(result: ResultDocument | Mapping[str, Any]) -> str:
    """A short human summary of one result (the JSON holds everything): the document, or a result's JSON read
    as one."""
    document = ResultDocument.of(result)
    run = document.run
    # The rule that decided the status, in the words the HTML report and the workbook use (reports/status_words).
    lines = [f"{run.name or 'run'} [{run.status}] {status_reason(document)}", *attention_lines(document.to_json()),
             *scale_out_lines(document)]
    if document.headline and has_figures(document):
        lines += figure_lines(document)
    return "\n".join(lines)


def scale_out_lines(document: ResultDocument) -> list[str]:
    """A merged run's clients (or ranks), how its users were spread and the clients' clock skew."""
    scale = document.scale_out
    if not scale:
        return []
    return [f"  {scale['clients']} {plural(scale['label'])} ({scale['mode']}), users {scale['users_scope']}: "
            f"{scale['users_per_client']} = {scale['users_total']}; clock skew {scale['clock_skew_s']:.6f} s"]


def figure_lines(document: ResultDocument) -> list[str]:
    """A measured run's figures: the headline, what did not complete, the wall clock outside the window, the
    QoS verdicts with their causes and next steps, and each tier."""
    head = document.headline
    lines = [f"  requests {head['requests_completed']} in {document.window['measured_s']:.1f}s; "
             f"{_fmt(head['avg_throughput_tokens_per_sec'])} tok/s wall-clock, "
             f"e2e p95 {_fmt(head['end_to_end_latency_p95_ms'])} ms, "
             f"cache hit rate {_fmt(head['cache_hit_rate'])}",
             *outcome_lines(document.metrics, document.workload or {}),
             *phase_lines(document.run.phases_s or {}),
             *qos_lines(document)]
    for name, tier in document.tiers.items():
        lines += tier_lines(name, tier)
    return lines


def qos_lines(document: ResultDocument) -> list[str]:
    """Each QoS class's service p95 against its SLA (a starved one as starved), the capacity answer, and each
    verdict's why and next step (reports/verdicts.py)."""
    verdicts = [f"{name} {_fmt(c['service_latency_ms']['p95'])}/{_fmt(c['sla_p95_ms'])} ms "
                f"{'met' if c['sla_met'] else 'MISSED'}" for name, c in document.class_figures.items()
                if c["requests"] and "service_latency_ms" in c]
    verdicts += starved_classes(document)
    lines = [f"  QoS service p95 / SLA: {', '.join(verdicts)}"] if verdicts else []
    answer = answer_line(document)
    if answer:
        lines.append(f"  {answer}")
    for verdict in explain(document):
        lines += [f"    {verdict.why}", f"    {verdict.next_step}"]
    return lines


def tier_lines(name: str, tier: Mapping[str, Any]) -> list[str]:
    """One tier: bytes, bandwidth and p95 (total and device) per operation, then its entry sizes, its stores
    without a transfer and its codec, each when there is something to say."""
    read, write = tier["read"], tier["write"]
    lines = [f"  {name:<10} read {_moved(read) / 1e9:8.3f} GB @ {_bw(read)}  "
             f"write {_moved(write) / 1e9:8.3f} GB @ {_bw(write)}  "
             f"read p95 {_fmt(read['latency_ms']['total']['p95'])} ms "
             f"(device {_fmt(read['latency_ms']['device']['p95'])})  "
             f"write p95 {_fmt(write['latency_ms']['total']['p95'])} ms "
             f"(device {_fmt(write['latency_ms']['device']['p95'])})",
             *command_lines(name, tier), *dedup_lines(tier)]
    coded = codec_line(tier["codec"]) if "codec" in tier else None
    if coded:
        lines.append(f"  {'':<10} {coded}")
    return lines


def outcome_lines(metrics: Mapping[str, Any], workload: Mapping[str, Any]) -> list[str]:
    """Requests that did not complete, the drain and dropped arrivals (docs/metrics.md): one line each, only
    when there is something to say."""
    requests, drain = metrics.get("requests") or {}, metrics.get("drain") or {}
    lines = []
    if requests.get("write_failed") or requests.get("failed"):
        lines.append(f"  not completed: {requests.get('write_failed', 0)} requests whose KV no tier had room for, "
                     f"{requests.get('failed', 0)} failed on storage errors (see errors)")
    moved = (drain.get("read_bytes", 0) + drain.get("write_bytes", 0)) / 1e9
    if drain.get("requests_completed") or drain.get("requests_cancelled") or moved:
        cancelled = f", {drain['requests_cancelled']} cancelled at its limit" if drain.get("requests_cancelled") else ""
        lines.append(f"  drain {drain['seconds']:.2f} s (limit {_fmt(drain.get('limit_s'))} s): "
                     f"{_count(drain.get('requests_completed', 0), 'request')} finished, {moved:.3f} GB moved"
                     f"{cancelled}; "
                     "not in the figures above")
    expired = ((metrics.get("cache") or {}).get("counters") or {}).get("expired_reads", 0)
    if expired:
        lines.append(f"  expired: {_count(expired, 'read')} of entries a tier's ttl had dropped, counted as misses "
                     "(cache.counters.expired_reads)")
    arrivals = workload.get("arrivals") or {}
    if arrivals.get("dropped"):
        lines.append(f"  open loop: {arrivals['offered']} arrivals offered ({_fmt(arrivals['offered_per_s'])}/s), "
                     f"{arrivals['served']} served ({_fmt(arrivals['served_per_s'])}/s), {arrivals['dropped']} "
                     f"dropped at a full backlog (peak {arrivals['backlog_peak']})")
    return lines


def _count(n: int, noun: str) -> str:
    """``1 request``, ``2 requests``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


#: Time outside the measured window worth a line of the summary (seconds, and share of the window).
OUTSIDE_WINDOW_S, OUTSIDE_WINDOW_SHARE = 10.0, 0.5
#: Cleanup (deleting the run's entries) worth the line by itself: it follows the result, so nothing else says it.
CLEANUP_LINE_S = 2.0
PHASE_WORDS = {"setup": "set-up", "warmup": "warm-up"}  # run.phases_s keys as the summary writes them


def phase_lines(phases: Mapping[str, float]) -> list[str]:
    """Where the wall clock went outside the measured window, when that is a large part of the run (issue
    16: a Test 4 run spent 107 s draining and 24 s deleting its files around a 20 s window)."""
    outside = {name: seconds for name, seconds in phases.items() if name != "measured"}
    total = sum(outside.values())
    large = total >= OUTSIDE_WINDOW_S and total >= OUTSIDE_WINDOW_SHARE * phases.get("measured", 0.0)
    if not large and phases.get("cleanup", 0.0) < CLEANUP_LINE_S:
        return []
    parts = ", ".join(f"{PHASE_WORDS.get(name, name)} {seconds:.1f} s"
                      for name, seconds in outside.items() if seconds >= 0.05)
    return [f"  outside the window: {parts} (run.phases_s; not in the figures above)"]


def command_lines(name: str, tier: dict[str, Any]) -> list[str]:
    """The tier's latencies above are per KV entry: say how large one is, and give the per-command p95."""
    parts = []
    for op in ("read", "write"):
        stats = tier[op]
        if stats.get("mean_entry_bytes"):
            commands = (stats.get("command_latency_ms") or {}).get("p95")
            per_command = f", per command p95 {_fmt(commands)} ms" if commands is not None else ""
            parts.append(f"{op} per entry of {format_bytes(stats['mean_entry_bytes'])}{per_command}")
    return [f"  {'':<10} {'; '.join(parts)}"] if parts else []


def dedup_lines(tier: dict[str, Any]) -> list[str]:
    """A shared tier's stores that sent nothing (docs/metrics.md, stores without a transfer): held, but in
    none of the write figures above, so the line says how many and how large."""
    write = tier["write"]
    if not write.get("dedup_stores"):
        return []
    return [f"  {'':<10} stored without a transfer: {write['dedup_stores']} entries, "
            f"{write['dedup_bytes'] / 1e9:.3f} GB another client had committed (not in write GB)"]


def render_plan(spec: Mapping[str, Any], plan: Mapping[str, Any], *, dry_run: bool = True) -> str:
    """The run plan as text (``--dry-run``): what the run will ask of each tier (``-v`` prints it before a real
    run); with several clients, each client's users and directories and the load of all of them."""
    kind = "dry run: no tier opened, nothing written" if dry_run else "before the run: drawn without touching storage"
    clients = plan.get("clients")
    work = plan["workload"]
    lines = [f"run plan: {spec.get('name') or 'run'} ({kind})", *_model_and_workload_lines(plan),
             *_clients_lines(clients), *_workers_lines(spec),
             f"  entry sizes per request profile (the run's first {work['sampled_requests']} requests, "
             f"seed {spec['seed']}):"]
    for name, row in plan["profiles"].items():
        lines.append(f"    {name:<12} {row['requests']:>5} req  context {row['context_tokens_mean']:>9,.0f} tokens  "
                     f"entry {format_bytes(row['entry_bytes_mean']):>11} mean, {format_bytes(row['entry_bytes_p95'])} "
                     f"p95  reads {format_bytes(row['read_bytes_per_request_mean'])}/request")
    lines.append(f"  tiers{', each client its own' if clients else ''} (capacity in mean entries):")
    for tier in plan["tiers"]:
        lines += _plan_tier_lines(tier, clients)
    lines.append(_offered_line(plan["offered"], clients))
    lines += [f"  WARNING: {warning}" for warning in plan.get("warnings") or []]
    return "\n".join(lines)


def _model_and_workload_lines(plan: Mapping[str, Any]) -> list[str]:
    """The model's bytes per token, and the workload: its users (per client or in client 0), its pacing and
    how long it runs."""
    model, work, clients = plan["model"], plan["workload"], plan.get("clients")
    length = (f"{work['warmup_s']:g} s warm-up + {work['duration_s']:g} s measured" if work["duration_s"]
              else f"{work['requests']} requests")
    whose = "" if not clients else " per client" if clients["users_scope"] == "per_client" else " in client 0"
    return [f"  model {model['name']} {model['dtype']} tp {model['tp']}: {format_bytes(model['bytes_per_token'])} "
            f"per token (all ranks)",
            f"  workload {work['source']}: {work['users']} users{whose}, max_inflight {work['max_inflight']}, "
            f"generation {work['generation_ms_per_token']:g} ms/token, {length}"]


def _workers_lines(spec: Mapping[str, Any]) -> list[str]:
    """Worker processes: the plan below is the run's as a whole, each process a share of it."""
    count = (spec.get("workers") or {}).get("processes", 1)
    if count == 1:
        return []
    return [f"  workers: {count} processes, process i driving users i, i+{count}, ... with 1/{count} of every tier "
            "below and of max_inflight (docs/scale-out.md); the figures below are the whole run's"]


def _clients_lines(clients: Mapping[str, Any] | None) -> list[str]:
    """Several clients: how many, how the users are shared, and whose stream the entry sizes are drawn from."""
    if not clients:
        return []
    users = clients["users"]
    shares = (f"each with {users[0]} users" if clients["users_scope"] == "per_client"
              else "users split " + " + ".join(str(n) for n in users))
    return [f"  clients: {clients['count']} ({clients['mode']}), {shares} = {clients['users_total']} in all "
            f"(users_scope {clients['users_scope']}); entry sizes from client 0's stream, the others draw "
            "the same distributions with their own seeds"]


def _plan_tier_lines(tier: Mapping[str, Any], clients: Mapping[str, Any] | None) -> list[str]:
    """One tier's capacity (in bytes and in mean entries; with clients, all of theirs) and the clients'
    directories."""
    capacity = tier["capacity_bytes"]
    size = "auto (detected when the run opens the tier)" if capacity == "auto" else format_bytes(capacity)
    entries = "" if tier["capacity_entries"] is None else f" = {tier['capacity_entries']:,.1f} entries"
    in_all = (f"; {clients['count']} x {size} = {format_bytes(capacity * clients['count'])} in all"
              if clients and isinstance(capacity, int | float) and capacity else "")
    lines = [f"    {tier['name']:<12} {tier['backend']:<6} {size}{entries}{in_all}"]
    if clients and tier["name"] in clients["directories"]:
        lines.append(f"    {'':<12} {'':<6} directories {', '.join(clients['directories'][tier['name']])}")
    return lines


def _offered_line(offered: Mapping[str, Any], clients: Mapping[str, Any] | None) -> str:
    """The load the plan offers at most (of every client), and what bounds it; unknown when nothing does."""
    if offered["requests_per_s"] is None:
        return "  offered load: unknown (no think time, generation pacing or arrival times to bound it)"
    every = f"all {clients['count']} clients, " if clients else ""
    moved, written = (format_bytes(offered[k] or 0) for k in ("bytes_per_s", "write_bytes_per_s"))
    return (f"  offered load: {offered['requests_per_s']:,.1f} requests/s = {moved}/s moved ({written}/s "
            f"written) at most ({every}{offered['basis']})")


def tier_percentiles(result: ResultDocument) -> str:
    """-v: every tier's total, host and device percentiles, per operation."""
    lines = []
    for name, tier in result.tiers.items():
        for op in ("read", "write"):
            stats = tier[op]
            for layer, summary in (stats.get("latency_ms") or {}).items():
                values = "  ".join(f"{p} {_fmt(summary.get(p))}" for p in ("p50", "p95", "p99", "p99.9", "max"))
                lines.append(f"  {name:<10} {op:<5} {layer:<6} ms: {values}")
    return "\n".join(lines)


def summarize_trials(summary: ResultDocument) -> str:
    """The trials summary: the headline figures' median, range and CV."""
    run, trials = summary.run, summary.trials
    assert trials is not None, "a trials summary"
    lines = [f"{run.name or 'run'} trials summary [{run.status}] {run.status_reason or 'status of its trials'}; "
             f"{trials.count} of {trials.requested} trials counted; headline = median"]
    for key in summary.headline:
        stats = trials.metrics.get(key)
        if stats and stats["median"] is not None:
            cv = "-" if stats["cv"] is None else f"{stats['cv']:.1%}"
            lines.append(f"  {stats['label']:<28} median {_fmt(stats['median'])} {stats['unit']}  "
                         f"[{_fmt(stats['min'])} .. {_fmt(stats['max'])}]  CV {cv}")
    return "\n".join(lines)


def _moved(op: dict[str, Any]) -> int:
    """The bytes the tier's device moved in the window, booked by time (docs/metrics.md); an older result's
    operation bytes."""
    return ((op.get("device") or {}).get("window") or {}).get("bytes", op["bytes"])


def _bw(op: dict[str, Any]) -> str:
    value = op.get("bandwidth_bytes_per_s")
    return "   -    " if not value else f"{value / 1e9:5.2f} GB/s"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.3f}"
    return str(int(value)) if isinstance(value, float) else str(value)
