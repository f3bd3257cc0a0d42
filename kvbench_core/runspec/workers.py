"""What ``workers: {processes: N}`` can split, judged when the spec loads.

Worker processes split one run (docs/scale-out.md, worker processes): each process drives the users whose
number is its index modulo N, with 1/N of every tier's capacity, of ``requests`` and of ``max_inflight``.
What has no honest share is refused here, one line naming the field, before any process starts: a count the
users, the workers or the request limit cannot cover, an autoscaler (it steers one cache's users), a
precondition (each process would fill the device again), a tier whose capacity is only known once it opens,
and ``clients`` (separate engines, each with its own cache: the two do not nest).  The I/O log, which one
file cannot take from N processes, is refused with the output paths (``loader.check_output_paths``); an
open-loop source's arrivals, known only once the source is built, when it is (``engine/run/setup.py``).
"""

from __future__ import annotations

from kvbench_core.contracts.errors import SpecError
from kvbench_core.runspec.bounds import check_an_entry_fits
from kvbench_core.runspec.plan import RunPlan, share


def check_workers(plan: RunPlan) -> None:
    """Refuse a ``workers.processes`` the plan cannot be split into, naming the first reason."""
    if plan.processes == 1:
        return
    reason = _refusal(plan)
    if reason is not None:
        raise SpecError(f"workers.processes: {plan.processes} {reason}")
    smallest = [(tier.name, float(share(int(tier.capacity), plan.processes, plan.processes - 1, least=0)))
                for tier in plan.enabled_tiers]
    try:
        check_an_entry_fits(smallest, plan.model.bytes_per_token_all_ranks, plan.eviction["large_entry_limit_ratio"])
    except SpecError as error:
        raise SpecError(f"workers.processes: {plan.processes} leaves each process 1/{plan.processes} of every "
                        f"tier: {error}") from None


def _refusal(plan: RunPlan) -> str | None:
    """Why ``plan`` cannot be split into its worker processes, or None."""
    count, workload = plan.processes, plan.workload
    if plan.clients > 1:
        return (f"cannot be combined with clients: {plan.clients}: clients are separate engines, each with its "
                "own cache; worker processes split one run. Choose one")
    if workload.users < count:
        return f"is more than workload.users: {workload.users}; every process drives at least one user"
    if 0 < workload.max_inflight < count:
        return f"is more than workload.max_inflight: {workload.max_inflight}; every process needs a worker"
    if plan.window.request_limit is not None and plan.window.request_limit < count:
        return f"is more than requests: {plan.window.request_limit}; every process issues at least one"
    if plan.autoscaler is not None:
        return (f"cannot split the autoscaler '{plan.autoscaler.choice.name}': it steers the users of one "
                "cache; autoscale with workers.processes: 1")
    if plan.precondition is not None:
        return "cannot split precondition: each process would fill the device again; precondition in a run of its own"
    auto = next((tier for tier in plan.enabled_tiers if tier.capacity == "auto"), None)
    if auto is not None:
        return (f"cannot split {auto.field}.capacity: auto (each process would judge the whole device as its "
                "own); give the tier a size")
    return None
