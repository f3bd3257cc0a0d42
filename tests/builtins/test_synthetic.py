"""The built-in synthetic workload (seed §3.9-3.11, §4.1, §4.8, §8.1): user profiles, QoS mix,
multi-turn conversations, prefix caching, RAG, the three modes, preconditioning, arrivals, determinism."""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from typing import Any

import numpy as np
import pytest
from conftest import memory_executor, small_spec

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.builtins.synthetic import DEFAULT_PROFILES, SYSTEM_PROMPTS, SyntheticSource
from kvbench_core.contracts.backend import BackendContext, ByteSource, IOTiming
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.workload import (
    DEFAULT_QOS,
    Phase,
    Request,
    WorkloadContext,
    decode_read_count,
    derive_phase,
)
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.run.precondition import precondition_bottom_tier
from kvbench_core.runspec.loader import validate

BPT = 1024  # bytes per token in the executor-level tests
NO_HISTORY = {"multi_turn": {"enabled": False}, "prefix_caching": {"enabled": False}}
SMALL = {"profile_mix": {"small": 1},
         "profiles": {"small": {"context": [100, 200], "generate": [1, 96], "think_s": [0, 0]}}}


def source(mode: str = "mixed", users: int = 4, seed: int = 1, **options: Any) -> SyntheticSource:
    return SyntheticSource(options, WorkloadContext(seed=seed, users=users, bytes_per_token=BPT, mode=mode))


def first_requests(src: SyntheticSource, users: int) -> list[Request]:
    return [src.next_request(user) for user in range(users)]


# -- user profiles and QoS ------------------------------------------------------------------------------------


def test_the_default_profiles_are_the_seeds() -> None:
    assert DEFAULT_PROFILES == {
        "chatbot": {"context": [512, 4096], "generate": [50, 200], "think_s": [0.1, 0.5]},
        "coding": {"context": [4096, 25000], "generate": [100, 500], "think_s": [0.2, 1.0]},
        "document": {"context": [4096, 16384], "generate": [200, 800], "think_s": [0.3, 1.5]},
    }


@pytest.mark.parametrize("profile", sorted(DEFAULT_PROFILES))
def test_each_profile_samples_within_its_ranges(profile: str) -> None:
    ranges = DEFAULT_PROFILES[profile]
    src = source(users=400, profile_mix={profile: 1}, **NO_HISTORY)
    requests = first_requests(src, 400)
    assert {r.tags["profile"] for r in requests} == {profile}
    for field, values in (("context", [r.context_tokens for r in requests]),
                          ("generate", [r.generate_tokens for r in requests]),
                          ("think_s", [r.think_s for r in requests])):
        low, high = ranges[field]
        assert low <= min(values) and max(values) <= high, field
        # 400 uniform draws cover the range: both ends within 5% of its width (seeded, so not flaky).
        assert min(values) < low + 0.05 * (high - low) and max(values) > high - 0.05 * (high - low), field
    for r in requests:
        assert r.write is not None and r.write.tokens == r.context_tokens and r.reads == ()


def test_the_profile_mix_is_honoured() -> None:
    n = 1000
    src = source(users=n, profile_mix={"chatbot": 3, "coding": 1, "document": 0}, **NO_HISTORY)
    counts = {name: 0 for name in DEFAULT_PROFILES}
    for r in first_requests(src, n):
        counts[r.tags["profile"]] += 1
    assert counts["document"] == 0
    assert abs(counts["chatbot"] / n - 0.75) < 4 * math.sqrt(0.75 * 0.25 / n)


def test_configured_profile_ranges_replace_the_defaults() -> None:
    src = source(users=50, profile_mix={"tiny": 1}, profiles={"tiny": {"context": [10, 20], "generate": [1, 2],
                                                                       "think_s": [0, 0]}}, **NO_HISTORY)
    for r in first_requests(src, 50):
        assert 10 <= r.context_tokens <= 20 and 1 <= r.generate_tokens <= 2 and r.think_s == 0


def test_a_partial_profile_override_keeps_the_other_default_ranges() -> None:
    src = source(users=30, profile_mix={"coding": 1}, profiles={"coding": {"context": [100, 200]}}, **NO_HISTORY)
    for r in first_requests(src, 30):
        assert 100 <= r.context_tokens <= 200 and 100 <= r.generate_tokens <= 500  # the seed's coding generation


@pytest.mark.parametrize(("options", "message"), [
    ({"profile_mix": {"chat": 1}}, "workload.options.profile_mix.chat: no such profile; known: chatbot, coding, "
                                   "document"),
    ({"profile_mix": {"chatbot": 0}}, "workload.options.profile_mix: every weight is 0; give at least one profile "
                                      "a weight"),
    ({"qos_mix": {"interactive": 0, "responsive": 0, "batch": 0}},
     "workload.options.qos_mix: every share is 0; give at least one QoS class a share"),
    ({"profiles": {"chatbot": {"context": [4096, 512]}}},
     "workload.options.profiles.chatbot.context: expected [low, high] with low <= high, got [4096, 512]"),
    ({"multi_turn": {"turn_tokens": [64, 8]}},
     "workload.options.multi_turn.turn_tokens: expected [low, high] with low <= high, got [64, 8]"),
    ({"profiles": {"tiny": {"context": [1, 2]}}, "profile_mix": {"tiny": 1}},
     "workload.options.profiles.tiny.generate: required field is missing (a new profile needs context, "
     "generate and think_s)"),
])
def test_option_mistakes_the_schema_cannot_see_are_spec_errors(options: dict[str, Any], message: str) -> None:
    # These once crashed the run (numpy ValueError, KeyError) or were silently clamped.
    raw = small_spec()
    raw["workload"]["options"] = options
    with pytest.raises(SpecError) as info:
        validate(raw)
    assert str(info.value) == message
    with pytest.raises(SpecError):
        source(**options)


def test_the_qos_mix_defaults_to_15_35_50() -> None:
    n = 2000
    qos = [r.qos for r in first_requests(source(users=n, **NO_HISTORY), n)]
    for name, expected in (("interactive", 0.15), ("responsive", 0.35), ("batch", 0.50)):
        share = qos.count(name) / n
        assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / n), name
    only = source(users=50, qos_mix={"interactive": 1, "responsive": 0, "batch": 0}, **NO_HISTORY)
    assert {r.qos for r in first_requests(only, 50)} == {"interactive"}


def test_qos_classes_priority_order_and_sla_targets() -> None:
    assert sorted(DEFAULT_QOS, key=lambda name: -DEFAULT_QOS[name].priority) == ["interactive", "responsive", "batch"]
    assert {name: (c.p95_target_s, c.p99_target_s) for name, c in DEFAULT_QOS.items()} == {
        "interactive": (0.050, 0.100), "responsive": (0.100, 0.200), "batch": (1.0, 5.0)}


def test_a_user_keeps_its_profile_and_qos_class() -> None:
    src = source(users=5)
    for user in range(5):
        requests = [src.next_request(user) for _ in range(6)]
        assert len({(r.qos, r.tags["profile"]) for r in requests}) == 1
        assert [r.seq for r in requests] == [1, 2, 3, 4, 5, 6]


# -- multi-turn conversations ------------------------------------------------------------------------------------


def test_each_turn_reads_the_previous_turn_and_the_context_grows() -> None:
    src = source(users=2, multi_turn={"end_probability": 0, "max_turns": 4, "turn_tokens": [10, 20]},
                 prefix_caching={"enabled": False})
    requests = [src.next_request(0) for _ in range(6)]
    first = requests[0]
    assert first.write is not None and first.write.key == "u0_c1_turn_1" and first.reads == ()
    for previous, turn in itertools.pairwise(requests[:4]):
        assert turn.conversation == first.conversation
        assert [(read.key, read.kind, read.tokens) for read in turn.reads] == [
            (previous.write.key, "turn", previous.write.tokens)]
        assert 10 <= turn.context_tokens - previous.context_tokens <= 20
        assert turn.write.tokens == turn.context_tokens  # each turn stores its whole grown context
    assert [r.write.key for r in requests] == ["u0_c1_turn_1", "u0_c1_turn_2", "u0_c1_turn_3", "u0_c1_turn_4",
                                               "u0_c2_turn_1", "u0_c2_turn_2"]  # max_turns ends a conversation
    assert requests[4].reads == ()


def test_multi_turn_reads_hit_the_previous_turns_entry() -> None:
    src = source(users=1, multi_turn={"end_probability": 0, "max_turns": 10}, prefix_caching={"enabled": False},
                 **SMALL)
    executor = memory_executor(bytes_per_token=BPT)
    for _ in range(5):
        executor.execute(src.next_request(0))
    counters = executor.telemetry.counters
    assert (counters["turn_reads"], counters["turn_hits"], counters.get("turn_misses", 0)) == (4, 4, 0)


def test_a_later_turns_decode_reads_cover_its_whole_context() -> None:
    """decode_bytes_read counts the full grown context per decode read, as in the seed (§3.1, §3.3)."""
    src = source(users=1, multi_turn={"end_probability": 0, "max_turns": 10}, prefix_caching={"enabled": False},
                 **SMALL)
    executor = memory_executor(bytes_per_token=BPT)
    executor.execute(src.next_request(0))
    turn = src.next_request(0)
    outcome = executor.execute(turn)
    assert turn.reads and turn.context_tokens > turn.reads[0].tokens
    assert outcome.decode_tokens_read == decode_read_count(turn.generate_tokens, 32) * turn.context_tokens


def test_live_conversations_are_bounded() -> None:
    src = source(users=5, multi_turn={"end_probability": 0, "max_live_conversations": 2},
                 prefix_caching={"enabled": False})
    for user in range(5):
        src.next_request(user)
    assert len(src._conversations) == 2  # the three oldest were forgotten ...
    again = src.next_request(0)
    assert again.reads == () and again.write.key == "u0_c2_turn_1"  # ... so user 0 starts a new one
    assert src.next_request(4).reads != ()  # user 4's conversation is still live


# -- prefix caching ------------------------------------------------------------------------------------------


def prefix_source(users: int = 2) -> SyntheticSource:
    return source(users=users, prefix_caching={"probability": 1, "prompts": 1, "prefix_tokens": [30, 30]},
                  multi_turn={"enabled": False}, **SMALL)


def test_decode_reads_the_shared_prefix_too_so_it_covers_the_whole_context() -> None:
    request = prefix_source().next_request(0)
    (prefix,) = request.reads
    assert request.decode_keys == (prefix.key, request.write.key)
    assert prefix.tokens + request.write.tokens == request.context_tokens
    outcome = memory_executor(bytes_per_token=BPT).execute(request)  # the prefix is stored on its first miss
    assert outcome.decode_tokens_read == decode_read_count(request.generate_tokens, 32) * request.context_tokens


def test_shared_system_prompts_are_keyed_by_content_hash() -> None:
    request = prefix_source().next_request(0)
    digest = hashlib.sha256(SYSTEM_PROMPTS[0].encode()).hexdigest()[:16]
    (read,) = request.reads
    assert (read.key, read.kind, read.tokens) == (f"kv_system_{digest}_t30", "prefix", 30)
    assert read.on_miss is not None and (read.on_miss.key, read.on_miss.tokens) == (read.key, 30)
    assert request.write.tokens == request.context_tokens - 30  # only the rest is prefilled


def test_one_prefix_key_always_means_one_size_even_when_short_contexts_cut_the_prompt() -> None:
    """A context shorter than its system prompt cuts the prompt: that is another prefix, under its own key.
    (One key with two sizes was read at the wrong size, and was two entries in a shared Redis.)"""
    src = source(users=8, prefix_caching={"probability": 1, "prompts": 3, "prefix_tokens": [200, 400]},
                 multi_turn={"enabled": False}, profile_mix={"short": 1},
                 profiles={"short": {"context": [50, 600], "generate": [1, 8], "think_s": [0, 0]}})
    sizes: dict[str, set[int]] = {}
    for _ in range(100):
        for user in range(8):
            request = src.next_request(user)
            (read,) = request.reads
            assert read.on_miss is not None and (read.on_miss.key, read.on_miss.tokens) == (read.key, read.tokens)
            assert read.key.endswith(f"_t{read.tokens}")
            sizes.setdefault(read.key, set()).add(read.tokens)
    assert all(len(tokens) == 1 for tokens in sizes.values())
    full = {tokens for _, tokens in src._prefix_prompts}
    cut = {next(iter(tokens)) for tokens in sizes.values()} - full
    assert len(full) > 1 and cut and len(sizes) > len(full)  # whole prompts and cut ones, each its own key


def test_a_prefix_hit_skips_the_prefix_write() -> None:
    src = prefix_source()
    executor = memory_executor(bytes_per_token=BPT)
    first, second = src.next_request(0), src.next_request(1)
    executor.execute(first)  # miss: the prefix is stored, then the rest of the context
    writes = executor.telemetry.tiers["dram"]["write"]
    assert (writes.ops, writes.bytes) == (2, first.context_tokens * BPT)
    executor.execute(second)  # hit: the prefix is read, only the rest is written
    assert (writes.ops, writes.bytes) == (3, (first.context_tokens + second.context_tokens - 30) * BPT)
    counters = executor.telemetry.counters
    assert (counters["prefix_reads"], counters["prefix_hits"], counters["prefix_misses"],
            counters["prefix_writes"]) == (2, 1, 1, 1)


# -- RAG ---------------------------------------------------------------------------------------------------


def rag_source() -> SyntheticSource:
    return source(users=3, rag={"enabled": True, "probability": 1, "documents": 3, "chunks_per_document": 2,
                                "chunk_tokens": 16, "top_k": 4}, **NO_HISTORY, **SMALL)


def test_documents_are_ingested_into_chunk_entries_ahead_of_time() -> None:
    preload = list(rag_source().preload())
    assert [(w.key, w.tokens, w.kind) for w in preload] == [
        (f"rag_doc{d}_chunk{c}", 16, "rag") for d in range(3) for c in range(2)]


def test_a_rag_query_loads_top_k_chunks_before_its_prefill() -> None:
    src = rag_source()
    executor = memory_executor(bytes_per_token=BPT)
    for write in src.preload():
        executor.cache.put(write.key, write.tokens * BPT)
    executor.telemetry.start_measuring()  # ingestion is not part of the measurement
    request = src.next_request(0)
    assert [read.kind for read in request.reads] == ["rag"] * 4
    assert len({read.key for read in request.reads}) == 4
    assert request.tags["rag"] is True
    assert request.context_tokens == request.write.tokens + 4 * 16  # the chunks are part of the context
    executor.execute(request)
    counters = executor.telemetry.counters
    assert (counters["rag_reads"], counters["rag_hits"]) == (4, 4)
    reads = executor.telemetry.tiers["dram"]["read"]
    decode_reads = counters["decode_reads"]
    assert reads.ops == 4 + decode_reads * 5  # the burst, then decode steps over chunks + own entry
    assert reads.bytes == 4 * 16 * BPT + decode_reads * request.context_tokens * BPT  # each step: the whole KV


# -- modes ---------------------------------------------------------------------------------------------------


def test_prefill_only_requests_have_no_decode() -> None:
    src = source(mode="prefill-only", users=20)
    assert all(derive_phase(r) is Phase.PREFILL for r in first_requests(src, 20))


def test_prefill_only_with_no_reads_has_no_reads_of_any_kind() -> None:
    src = source(mode="prefill-only", users=20, no_reads=True, rag={"enabled": True, "probability": 1})
    for _ in range(3):
        for r in first_requests(src, 20):
            assert r.reads == () and r.phase is Phase.PREFILL and r.write is not None
    assert list(src.preload()) == []


def test_decode_only_reads_pre_populated_entries() -> None:
    src = source(mode="decode-only", users=3)
    preload = list(src.preload())
    assert len(preload) == 3 * 10  # users x 10 entries, as the seed's decode-only mode
    keys = {w.key for w in preload}
    for _ in range(5):
        for r in first_requests(src, 3):
            assert r.write is None and r.reads == () and r.phase is Phase.DECODE
            (key,) = r.decode_keys
            assert key in keys
            assert r.context_tokens == next(w.tokens for w in preload if w.key == key)


def tier_ops(result: dict[str, Any], op: str) -> int:
    return sum(tier[op]["ops"] for tier in result["metrics"]["tiers"].values())


def test_decode_only_writes_nothing_during_measurement(run_spec: Any) -> None:
    _, result = run_spec(small_spec(requests=20, workload={"mode": "decode-only", "users": 3}))
    assert result["workload"]["preload"]["entries"] == 30
    assert tier_ops(result, "write") == 0
    assert tier_ops(result, "read") >= 20
    assert result["metrics"]["cache"]["read_misses"] == 0


def test_prefill_only_without_history_reads_nothing(run_spec: Any) -> None:
    options = {"multi_turn": {"enabled": False}, "prefix_caching": {"enabled": False}}
    _, result = run_spec(small_spec(requests=20, workload={"mode": "prefill-only", "options": options}))
    assert tier_ops(result, "read") == 0
    assert tier_ops(result, "write") >= 20


# -- preconditioning -------------------------------------------------------------------------------------------


class CountingCPU(CPUMemoryBackend):
    def __init__(self) -> None:
        super().__init__({}, BackendContext(tier_name="bottom", run_id="pre"))
        self.written = 0
        self.peak_entries = 0
        self._count_lock = threading.Lock()

    def write(self, key: str, source: ByteSource) -> IOTiming:
        timing = super().write(key, source)
        with self._count_lock:
            self.written += source.size
            self.peak_entries = max(self.peak_entries, len(self._entries))
        return timing


@pytest.mark.parametrize(("size", "expected"), [("auto", 2 * (8 << 20)), (5 << 20, 5 << 20), (5 << 20 | 1, 6 << 20)])
def test_preconditioning_writes_the_requested_bytes_into_the_bottom_tier(size: Any, expected: int) -> None:
    backend = CountingCPU()
    tier = Tier("bottom", backend, 8 << 20)
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=4 << 20)
    report = precondition_bottom_tier(tier, pool, {"size": size, "entry_size": 1 << 20, "threads": 2},
                                      threading.Event())
    assert report["bytes"] == backend.written == expected
    assert backend.peak_entries * (1 << 20) <= tier.capacity  # cycles over keys that fit the tier
    assert backend._entries == {}  # and removes them afterwards


def test_preconditioning_is_not_measured(run_spec: Any) -> None:
    _, result = run_spec(small_spec(requests=5, precondition={"size": "4MiB", "entry_size": "1MiB", "threads": 2},
                                    cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "8MiB"}]}))
    assert result["workload"]["precondition"]["bytes"] == 4 << 20
    writes = result["metrics"]["tiers"]["dram"]["write"]
    counters = result["metrics"]["cache"]["counters"]
    assert writes["ops"] == counters.get("prefill_writes", 0) + counters.get("prefix_writes", 0)


# -- arrivals and determinism ------------------------------------------------------------------------------------


def test_open_loop_arrivals_are_poisson_at_the_given_rate() -> None:
    rate, n = 50.0, 4000
    src = source(users=10, arrival={"process": "poisson", "rate": rate}, **NO_HISTORY)
    assert src.open_loop
    arrivals = np.array([src.next_request(i % 10).arrival_s for i in range(n)])
    gaps = np.diff(np.concatenate([[0.0], arrivals]))
    assert (gaps > 0).all()
    # Exponential gaps: mean 1/rate with standard error (1/rate)/sqrt(n); coefficient of variation 1.
    assert abs(gaps.mean() - 1 / rate) < 5 * (1 / rate) / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.1


def test_closed_loop_requests_carry_no_arrival_time() -> None:
    src = source(users=3)
    assert not src.open_loop
    assert all(r.arrival_s is None for r in first_requests(src, 3))


def stream(src: SyntheticSource, order: list[int]) -> dict[int, list[tuple[Any, ...]]]:
    """Per-user request sequences when users ask in ``order``."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    for user in order:
        r = src.next_request(user)
        out.setdefault(user, []).append((r.qos, r.context_tokens, r.generate_tokens, r.think_s, r.phase,
                                         tuple((x.key, x.kind, x.tokens) for x in r.reads),
                                         (r.write.key, r.write.tokens) if r.write else None, r.decode_keys))
    return out


@pytest.mark.parametrize("mode", ["mixed", "prefill-only", "decode-only"])
def test_the_same_seed_gives_the_same_stream_whatever_the_interleaving(mode: str) -> None:
    options = {"rag": {"enabled": True, "probability": 0.3, "documents": 4}}
    rng = np.random.default_rng(0)
    round_robin = [u for _ in range(12) for u in range(6)]
    shuffled = [int(u) for u in rng.permutation(round_robin)]  # what thread timing might do
    one_by_one = sorted(round_robin)
    a = stream(source(mode, users=6, seed=42, **options), round_robin)
    b = stream(source(mode, users=6, seed=42, **options), shuffled)
    c = stream(source(mode, users=6, seed=42, **options), one_by_one)
    assert a == b == c
    assert a != stream(source(mode, users=6, seed=43, **options), round_robin)
