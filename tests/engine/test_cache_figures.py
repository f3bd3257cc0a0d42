"""Cache figures (#16): cache_hit_rate counts decode misses, occupancy_at_end is read before cleanup, a
decode-only population never overfills the tiers, the seed's refused cascade is the default policy,
cache_state steady is detected, prefix reuse counts multi-turn reuse, queue depth is measured."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import memory_executor, small_spec

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.workload import DEFAULT_QOS, Phase, Request
from kvbench_core.engine.cache.cache_figures import cache_state_at_open, reuse_rate
from kvbench_core.engine.cache.cache_types import EvictionPolicy, Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry

S = 1 << 20


def test_a_decode_read_of_an_entry_already_gone_is_a_read_miss() -> None:
    executor = memory_executor()
    executor.execute(Request(0, 1, "batch", context_tokens=50, generate_tokens=10, decode_keys=("gone",),
                             phase=Phase.DECODE))
    assert executor.telemetry.read_misses == 1  # cache_hit_rate's denominator sees it


def test_occupancy_at_end_is_what_the_tiers_held_before_cleanup(run_spec: Any) -> None:
    state, result = run_spec(small_spec())
    occupancy = result["metrics"]["cache"]["occupancy_at_end"]["dram"]
    assert occupancy["entries"] > 0 and occupancy["bytes"] > 0
    assert state.tiers[0].usage == 0  # cleanup emptied the tier afterwards


def test_a_decode_only_population_stops_at_the_eviction_targets(run_spec: Any, capsys: Any) -> None:
    """8 users x 10 entries of 16-64 tokens (0.4-1.5 MiB) cannot all fit in 8 MiB: the population stops
    before it would evict its own entries, and says so."""
    _, result = run_spec(small_spec(workload={"users": 8, "mode": "decode-only"},
                                    cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "8MiB"}]}))
    preload = result["workload"]["preload"]
    assert preload["complete"] is False and 0 < preload["bytes"] <= 0.8 * (8 << 20)
    assert "the rest of the population was not stored" in capsys.readouterr().err


def cascade(policy: EvictionPolicy) -> MultiTierCache:
    telemetry = Telemetry(list(DEFAULT_QOS))
    telemetry.start_measuring()
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=4 << 20)
    tiers = [Tier(f"cpu{i}", CPUMemoryBackend({}, BackendContext(tier_name=f"cpu{i}", run_id="t")), 2.5 * S)
             for i in range(3)]
    return MultiTierCache(tiers, telemetry, pool.payload, policy=policy)


def test_by_default_a_cascade_the_tier_below_cannot_take_is_refused_not_dropped() -> None:
    """The seed's _ensure_space_in_tier returns False when the next tier cannot make room: nothing is lost."""
    cache = cascade(EvictionPolicy(max_recursion_depth=1))
    stored = [key for key in (f"k{i}" for i in range(7)) if cache.put(key, S) is not None]
    assert cache.telemetry.counters.get("evicted_without_room_below", 0) == 0
    assert cache.telemetry.counters["cascade_refused"] >= 1
    # An entry stored is only ever lost the seed's way: deleted as the LRU of the bottom tier.
    lost = sum(cache.location(key) is None for key in stored)
    assert lost == cache.telemetry.evictions_deleted
    dropping = cascade(EvictionPolicy(max_recursion_depth=1, no_room_below="drop"))
    for i in range(7):
        dropping.put(f"k{i}", S)
    assert dropping.telemetry.counters["evicted_without_room_below"] >= 1  # the named policy drops


def tier_holding(held_mib: float, *, evicted_mib: float = 0, largest_mib: float = 1.5) -> Tier:
    """A 16 MiB tier holding ``held_mib``, having evicted ``evicted_mib`` and taken entries up to ``largest_mib``."""
    return Tier("dram", CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t")), 16 * S,
                usage=int(held_mib * S), evicted_bytes=int(evicted_mib * S), largest_entry=int(largest_mib * S))


def test_steady_allows_the_eviction_sawtooth_but_needs_a_turnover() -> None:
    """Room is made only until the new entry fits: a full 16 MiB tier (target 12.8 MiB) of 1.5 MiB entries
    holds anywhere from 11.3 to 12.8 MiB, and is steady at either end once it has turned over."""
    assert cache_state_at_open([tier_holding(12.8, evicted_mib=16)], 0.8) == "steady"
    assert cache_state_at_open([tier_holding(11.4, evicted_mib=16)], 0.8) == "steady"  # near the sawtooth's low
    assert cache_state_at_open([tier_holding(11.2, evicted_mib=16)], 0.8) == "warm"  # room for one more
    assert cache_state_at_open([tier_holding(12.8, evicted_mib=15)], 0.8) == "warm"  # not turned over
    assert cache_state_at_open([tier_holding(0)], 0.8) == "cold"


def test_a_tier_drained_by_idle_time_is_steady_once_what_left_it_reaches_what_it_holds() -> None:
    """The tier below's cold_after holds the tier above at a level its timer sets, below its target: full is
    waived there, the turnover still counts (cold demotions are bytes that left it)."""
    def with_cold_tier_below(upper: Tier) -> list[Tier]:
        below = Tier("disk", CPUMemoryBackend({}, BackendContext(tier_name="disk", run_id="t")), 24 * S,
                     cold_after=1.0, usage=int(20 * S), evicted_bytes=int(64 * S), largest_entry=int(1.5 * S))
        return [upper, below]

    assert cache_state_at_open(with_cold_tier_below(tier_holding(3, evicted_mib=3)), 0.8) == "steady"
    assert cache_state_at_open(with_cold_tier_below(tier_holding(3, evicted_mib=2)), 0.8) == "warm"
    assert cache_state_at_open([tier_holding(3, evicted_mib=3)], 0.8) == "warm"  # no timer: 3 of 12.8 MiB


def test_a_window_opened_on_a_full_turned_over_cache_is_steady(run_spec: Any) -> None:
    _, result = run_spec(small_spec(warmup=0.5, requests=5, workload={"options": {"multi_turn": {"max_turns": 2}}},
                                    cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "16MiB"}]}))
    assert result["declaration"]["tiers"]["cache_state"]["value"] == "steady"
    _, result = run_spec(small_spec(requests=5))
    assert result["declaration"]["tiers"]["cache_state"]["value"] == "cold"


def test_prefix_reuse_counts_multi_turn_reuse() -> None:
    assert reuse_rate({"turn_reads": 4, "turn_hits": 3}) == 0.75
    assert reuse_rate({"prefix_reads": 2, "prefix_hits": 2, "turn_reads": 2, "turn_hits": 0}) == 0.5
    assert reuse_rate({}) is None


def test_a_multi_turn_run_without_shared_prefixes_declares_its_reuse(run_spec: Any) -> None:
    _, result = run_spec(small_spec(workload={"options": {"prefix_caching": {"enabled": False}}}))
    counters = result["metrics"]["cache"]["counters"]
    assert counters.get("prefix_reads", 0) == 0 and counters["turn_reads"] > 0
    assert result["declaration"]["workload"]["prefix_reuse_rate"]["value"] == pytest.approx(
        counters["turn_hits"] / counters["turn_reads"], abs=1e-6)


def test_the_declared_queue_depth_is_measured_per_tier_not_max_inflight(run_spec: Any) -> None:
    _, result = run_spec(small_spec(workload={"users": 4, "max_inflight": 4}))
    access = result["declaration"]["access"]
    depth = access["queue_depth"]["value"]["dram"]
    assert depth is not None and 0 < depth <= 4  # commands in flight on average: at most the workers
    assert access["request_concurrency"]["value"] == 4


@pytest.mark.parametrize("p95", ["10ms", 0.2])
def test_qos_sla_targets_are_configurable_per_class(run_spec: Any, p95: Any) -> None:
    _, result = run_spec(small_spec(qos={"interactive": {"p95": p95}}))
    qos = result["metrics"]["qos"]
    assert qos["interactive"]["sla_p95_ms"] == pytest.approx(10.0 if p95 == "10ms" else 200.0)
    assert qos["interactive"]["sla_p99_ms"] == 100.0 and qos["batch"]["sla_p95_ms"] == 1000.0  # the seed's
