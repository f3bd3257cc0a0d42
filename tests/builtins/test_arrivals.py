"""The arrival process (#16, #19): open-loop offered load beyond what is served is counted, not queued
without bound; workload statistics describe served requests; start-up does not depend on the user count;
the seed's conversation and capacity-autoscaler defaults."""

from __future__ import annotations

import time
from typing import Any

from conftest import small_spec

from kvbench_core.builtins.autoscalers import CapacityAutoscaler
from kvbench_core.builtins.synthetic import SyntheticSource
from kvbench_core.contracts.autoscaler import TelemetrySample
from kvbench_core.contracts.workload import Request, WorkloadContext
from kvbench_core.engine.run.arrivals import ClosedLoopArrivals, UserPool, backlog_limit
from kvbench_core.engine.run.scheduler import EventHeap


def test_open_loop_arrivals_beyond_what_is_served_are_dropped_and_counted(run_spec: Any) -> None:
    """10,000 arrivals/s on two workers: the backlog stays bounded, the rest is offered but dropped."""
    spec = small_spec(duration=0.6, workload={"users": 4, "max_inflight": 2,
                                              "options": {"arrival": {"process": "poisson", "rate": 10_000}}})
    del spec["requests"]
    _, result = run_spec(spec)
    arrivals = result["workload"]["arrivals"]
    served = result["metrics"]["requests"]["completed"]
    assert arrivals["dropped"] > 0 and arrivals["offered"] >= arrivals["issued"] + arrivals["dropped"] - 1
    assert arrivals["backlog_peak"] <= backlog_limit(2)
    assert arrivals["served"] == served and arrivals["offered_per_s"] > arrivals["served_per_s"]
    stats = result["workload"]["stats"]
    assert stats["input_length"]["count"] == stats["requests_served"] == served  # what was served, not queued


def test_a_million_users_start_at_once(run_spec: Any) -> None:
    spec = small_spec(duration=1.0, workload={"users": 1_000_000, "max_inflight": 2})
    del spec["requests"]
    began = time.perf_counter()
    _, result = run_spec(spec)
    assert time.perf_counter() - began < 6.0  # the users are a counter, not a million requests or RNGs
    assert result["metrics"]["requests"]["completed"] > 0


def users_of(pool: UserPool, n: int) -> list[int | None]:
    return [taken[0] if (taken := pool.take()) is not None else None for _ in range(n)]


def test_the_user_pool_resizes_without_losing_ready_users() -> None:
    pool = UserPool(3)
    assert users_of(pool, 4) == [0, 1, 2, None]
    pool.ready(2, now=0.0)
    pool.resize(2)
    assert pool.take() is None  # user 2 is outside the pool: parked
    pool.resize(3)
    assert users_of(pool, 1) == [2]  # ... and back when it grows


def test_a_user_whose_request_ends_while_the_pool_is_smaller_comes_back_when_it_grows() -> None:
    """6 users, shrunk to 5 while user 5's request is in flight, grown to 6 again: user 5 issues again."""
    events = EventHeap()
    arrivals = ClosedLoopArrivals(source=None, users=UserPool(6), events=events, limit=10)  # type: ignore[arg-type]
    assert users_of(arrivals.users, 7) == [0, 1, 2, 3, 4, 5, None]
    arrivals.users.resize(5)
    arrivals.finished(Request(user_id=5, seq=0, qos="responsive", context_tokens=1, generate_tokens=1), now=0.0)
    for kind, payload in events.pop_due(now=1.0):
        assert arrivals.on_event(kind, payload, now=1.0)
    assert arrivals.users.take() is None  # outside the pool: parked, not lost
    arrivals.users.resize(6)
    assert users_of(arrivals.users, 1) == [5]


def test_a_ready_user_held_back_by_a_full_backlog_is_enqueued_at_the_instant_it_became_ready() -> None:
    """Coordinated omission: 4 users, room for 2 in the backlog.  The two held back are handed over, when room
    comes, with the instant they became ready (issuing began at 10, the pool grew at 12, a think ended at
    13), so their wait for room is queue wait, as it is for a user of a real server."""
    clock = [12.0]
    pool = UserPool(2, clock=lambda: clock[0])
    source = SyntheticSource({}, WorkloadContext(seed=1, users=8, bytes_per_token=1))
    arrivals = ClosedLoopArrivals(source, pool, EventHeap(), limit=2)
    enqueued: list[tuple[int, float, float | None]] = []

    def submit(request: Request, now: float, ready: float | None) -> None:
        enqueued.append((request.user_id, now, ready))

    arrivals.start(10.0)
    pool.resize(4)  # at 12: users 2 and 3 join
    arrivals.issue(now=10.5, waiting=0, submit=submit)
    assert enqueued == [(0, 10.5, 10.0), (1, 10.5, 10.0)]
    arrivals.on_event("think", 1, now=13.0)  # user 1 back from thinking, the backlog still full
    arrivals.issue(now=20.0, waiting=0, submit=submit)  # room for two more, at 20
    arrivals.issue(now=21.0, waiting=0, submit=submit)
    assert enqueued[2:] == [(2, 20.0, 12.0), (3, 20.0, 12.0), (1, 21.0, 13.0)]


def test_conversation_defaults_are_the_seeds() -> None:
    source = SyntheticSource({}, WorkloadContext(seed=1, users=1, bytes_per_token=1))
    assert (source.multi_turn["max_turns"], source.multi_turn["max_live_conversations"]) == (50, 1000)


def test_a_capacity_stage_with_too_few_requests_is_extended_not_judged() -> None:
    scaler = CapacityAutoscaler({}, initial_users=2, max_users=100)
    assert CapacityAutoscaler.options_schema["properties"]["interval_s"]["minimum"] == 5.0

    def stage(users: int, requests: int, throughput: float) -> TelemetrySample:
        return TelemetrySample(t_s=0, users=users, requests=requests, generated_tokens_per_s=throughput,
                               context_tokens_per_s=0, read_bytes_per_s=0, write_bytes_per_s=0, e2e_p95_s={},
                               e2e_p99_s={}, service_p95_s={}, service_p99_s={}, sla_p95_s={}, sla_p99_s={},
                               storage_p95_s=0)

    assert scaler.decide(stage(2, 40, 100.0)).action == "scale_up"
    dip = scaler.decide(stage(4, 3, 94.0))  # a 6 % dip measured on three requests
    assert (dip.action, dip.converged) == ("hold", False)


class PacedSource:
    """Arrivals every ``gap_s`` on the source's clock (0: all at once, a replay at ``speedup: 0``)."""

    def __init__(self, gap_s: float, count: int) -> None:
        self.gap_s, self.count, self.made = gap_s, count, 0

    def next_request(self, user: int) -> Any:
        from types import SimpleNamespace

        if self.made >= self.count:
            return None
        self.made += 1
        return SimpleNamespace(arrival_s=(self.made - 1) * self.gap_s)


def offered_per_s(gap_s: float, count: int, window_s: float) -> float | None:
    from kvbench_core.engine.run.arrivals import OpenLoopArrivals

    arrivals = OpenLoopArrivals(PacedSource(gap_s, count), UserPool(1), started_at=0.0, limit=10**9)
    arrivals.issue(window_s, 0, lambda request, now, ready: None)
    return arrivals.stats.as_dict(window_s, served=0)["offered_per_s"]


def test_offered_per_s_is_the_arrival_rate_and_null_where_there_is_none() -> None:
    """#28 §5: it was the scheduler's pass rate for a replay at speedup 0 (9,181/s) and 0.0 for a closed
    loop.  A paced open loop offers its arrivals per second; arrivals all due at once offer an unbounded
    rate (null); a closed loop offers what it is served (null)."""
    from kvbench_core.engine.run.arrivals import ArrivalStats

    assert offered_per_s(0.01, 1000, 2.0) == 100.5  # 201 arrivals due in [0, 2 s]
    assert offered_per_s(0.0, 1000, 2.0) is None
    assert ArrivalStats().as_dict(2.0, served=10)["offered_per_s"] is None  # the closed loop's stats


def test_a_closed_loop_run_reports_no_offered_rate(run_spec: Any) -> None:
    spec = small_spec(duration=0.4)
    del spec["requests"]
    _, result = run_spec(spec)
    arrivals = result["workload"]["arrivals"]
    assert arrivals["offered_per_s"] is None and arrivals["served_per_s"] > 0
