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
from kvbench_core.contracts.workload import WorkloadContext
from kvbench_core.engine.arrivals import UserPool, backlog_limit


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


def test_the_user_pool_resizes_without_losing_ready_users() -> None:
    pool = UserPool(3)
    assert [pool.take() for _ in range(4)] == [0, 1, 2, None]
    pool.ready(2)
    pool.resize(2)
    assert pool.take() is None  # user 2 is outside the pool: parked
    pool.resize(3)
    assert pool.take() == 2  # ... and back when it grows


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
