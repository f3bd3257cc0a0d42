"""The runner and the request executor (seed §3.1, §3.3, §3.9): phases and decode reads, the QoS
priority queue, users without threads, max_inflight, stop conditions, warm-up, open-loop arrivals."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from conftest import memory_executor, small_spec
from testkit import registered

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import ByteSink, ByteSource, IOTiming
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.contracts.workload import DEFAULT_QOS, Phase, Read, Request, Write, decode_read_count, derive_phase
from kvbench_core.engine.run.runner import Runner
from kvbench_core.engine.run.scheduler import EventHeap, PriorityRequestQueue
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run

# -- phases and decode reads (executor) ------------------------------------------------------------------------


@pytest.mark.parametrize(("generate", "reads"), [(0, 1), (1, 1), (32, 1), (33, 2), (64, 2), (100, 4), (500, 16)])
def test_decode_reads_are_batched_by_32(generate: int, reads: int) -> None:
    # The seed's §3.3 table.
    assert decode_read_count(generate, 32) == reads
    executor = memory_executor()
    outcome = executor.execute(Request(0, 1, "batch", context_tokens=100, generate_tokens=generate,
                                       write=Write("k", 100)))
    telemetry = executor.telemetry
    assert (telemetry.tiers["dram"]["write"].ops, telemetry.tiers["dram"]["read"].ops) == (1, reads)
    assert telemetry.counters["decode_reads"] == reads
    assert outcome.decode_tokens_read == reads * 100


def test_decode_batch_is_configurable() -> None:
    executor = memory_executor(decode_batch=8)
    executor.execute(Request(0, 1, "batch", context_tokens=10, generate_tokens=100, write=Write("k", 10)))
    assert executor.telemetry.tiers["dram"]["read"].ops == 13


@pytest.mark.parametrize(("context", "phase", "reads"), [(9_999, Phase.PREFILL_DECODE, 4),
                                                        (10_000, Phase.PREFILL, 0), (25_000, Phase.PREFILL, 0)])
def test_long_contexts_are_prefill_only(context: int, phase: Phase, reads: int) -> None:
    request = Request(0, 1, "batch", context_tokens=context, generate_tokens=100, write=Write("k", context))
    assert derive_phase(request) is phase
    executor = memory_executor(bytes_per_token=16)
    executor.execute(request)
    tier = executor.telemetry.tiers["dram"]
    assert (tier["write"].ops, tier["write"].bytes, tier["read"].ops) == (1, context * 16, reads)


def test_a_decode_phase_request_only_reads() -> None:
    executor = memory_executor()
    executor.cache.put("pre", 50 * 1024)
    executor.telemetry.start_measuring()
    outcome = executor.execute(Request(0, 1, "batch", context_tokens=50, generate_tokens=64, decode_keys=("pre",),
                                       phase=Phase.DECODE))
    tier = executor.telemetry.tiers["dram"]
    assert (tier["write"].ops, tier["read"].ops, outcome.decode_tokens_read) == (0, 2, 100)


def test_a_decode_miss_ends_the_decode_reads() -> None:
    executor = memory_executor()
    outcome = executor.execute(Request(0, 1, "batch", context_tokens=50, generate_tokens=500, decode_keys=("gone",),
                                       phase=Phase.DECODE))
    counters = executor.telemetry.counters
    assert (counters["decode_reads"], counters["decode_misses"], outcome.decode_tokens_read) == (1, 1, 0)


def test_reads_come_before_the_prefill_write_and_a_miss_performs_its_on_miss_write() -> None:
    executor = memory_executor()
    order: list[tuple[str, str]] = []
    cache = executor.cache
    get, start_put = cache.get, cache.start_put  # a request's entries go through its WriteStream
    cache.get = lambda key, *rest: order.append(("get", key)) or get(key, *rest)  # type: ignore[method-assign]
    cache.start_put = (  # type: ignore[method-assign]
        lambda key, size, *rest: order.append(("put", key)) or start_put(key, size, *rest))
    executor.execute(Request(0, 1, "batch", context_tokens=40, generate_tokens=1, write=Write("turn2", 10),
                             reads=(Read("prefix", 30, "prefix", on_miss=Write("prefix", 30, "prefix")),
                                    Read("turn1", 20, "turn"))))
    assert order == [("get", "prefix"), ("put", "prefix"), ("get", "turn1"), ("put", "turn2"), ("get", "turn2")]


# -- the QoS priority queue -----------------------------------------------------------------------------------


def test_higher_priority_first_then_oldest_first() -> None:
    queue = PriorityRequestQueue()
    priority = {name: c.priority for name, c in DEFAULT_QOS.items()}
    arrivals = [("b1", "batch"), ("r1", "responsive"), ("i1", "interactive"), ("b2", "batch"),
                ("i2", "interactive"), ("r2", "responsive")]
    for t, (item, qos) in enumerate(arrivals):
        queue.put(item, priority[qos], float(t))
    assert [queue.get() for _ in arrivals] == ["i1", "i2", "r1", "r2", "b1", "b2"]


def test_equal_priority_and_time_keeps_insertion_order() -> None:
    queue = PriorityRequestQueue()
    for item in "abcde":
        queue.put(item, 1, 0.0)
    assert [queue.get() for _ in "abcde"] == list("abcde")


def test_a_late_interactive_request_overtakes_waiting_batch_work() -> None:
    queue = PriorityRequestQueue()
    for i in range(3):
        queue.put(f"batch{i}", 1, float(i))
    assert queue.get() == "batch0"
    queue.put("interactive", 3, 10.0)
    assert [queue.get(), queue.get()] == ["interactive", "batch1"]
    assert len(queue) == 1


def test_get_blocks_until_an_item_or_close() -> None:
    queue = PriorityRequestQueue()
    got: list[Any] = []
    consumer = threading.Thread(target=lambda: got.extend([queue.get(), queue.get()]))
    consumer.start()
    queue.put("x", 1, 0.0)
    queue.close()
    consumer.join(30)
    assert got == ["x", None]
    queue.put("late", 1, 0.0)
    assert queue.drain() == ["late"] and len(queue) == 0


def test_the_event_heap_releases_events_in_time_order() -> None:
    events = EventHeap()
    events.push(3.0, "complete", "c")
    events.push(1.0, "issue", "a")
    events.push(1.0, "issue", "b")
    assert events.pending("issue") == 2
    assert events.pop_due(0.5) == []
    assert events.pop_due(2.0) == [("issue", "a"), ("issue", "b")]
    assert events.pop_due(10.0) == [("complete", "c")]


# -- runs with an instrumented tier ---------------------------------------------------------------------------


class Probe(CPUMemoryBackend):
    """A DRAM tier that can be slowed down or made to fail, and records what the runner does to it."""

    name = "probe"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False,
        "properties": {"delay_s": {"type": "number"}, "fail_writes": {"type": "boolean"}}}
    lock = threading.Lock()
    active = 0
    peak = 0
    writes = 0
    threads: ClassVar[set[str]] = set()

    @classmethod
    def reset(cls) -> None:
        cls.active = cls.peak = cls.writes = 0
        cls.threads = set()

    def _op(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.active += 1
            cls.peak = max(cls.peak, cls.active)
            cls.threads.add(threading.current_thread().name)
        time.sleep(self.options.get("delay_s", 0))

    def _done(self) -> None:
        with type(self).lock:
            type(self).active -= 1

    def write(self, key: str, source: ByteSource) -> IOTiming:
        self._op()
        try:
            if self.options.get("fail_writes"):
                raise OSError(5, "Input/output error")
            type(self).writes += 1
            return super().write(key, source)
        finally:
            self._done()

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        self._op()
        try:
            return super().read(key, size, sink)
        finally:
            self._done()


class ProbePlugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"probe": Probe}


@pytest.fixture
def probe() -> Iterator[type[Probe]]:
    Probe.reset()
    with registered(ProbePlugin(), "test-probe-backend"):
        yield Probe


def probe_spec(delay_s: float = 0.0, **extra: Any) -> dict[str, Any]:
    return small_spec(cache={"tiers": [{"name": "probe", "backend": "probe", "capacity": "64MiB",
                                        "options": {"delay_s": delay_s}}]}, **extra)


def accounted(result: dict[str, Any]) -> int:
    requests = result["metrics"]["requests"]
    return requests["completed"] + requests["failed"] + requests["unfinished"]


def test_users_are_not_threads_and_max_inflight_bounds_the_work(probe: type[Probe], run_spec: Any) -> None:
    state, result = run_spec(probe_spec(0.005, requests=40, workload={"users": 60, "max_inflight": 3}))
    assert state.worker_count == 3
    assert probe.threads <= {"kvbench-worker-0", "kvbench-worker-1", "kvbench-worker-2"}
    assert 1 < probe.peak <= 3
    assert result["workload"]["workers"] == 3


def test_max_inflight_zero_means_a_worker_per_user(probe: type[Probe], run_spec: Any) -> None:
    state, _ = run_spec(probe_spec(requests=5, workload={"users": 6, "max_inflight": 0}))
    assert state.worker_count == 6


def test_a_request_count_stops_the_run(probe: type[Probe], run_spec: Any) -> None:
    state, result = run_spec(probe_spec(requests=12, workload={"users": 4, "max_inflight": 1}))
    # 12 < the 20 a p95 needs: the run stopped where asked, and its status says the p95 is the slowest's
    assert (state.status, state.stop_reason) == ("inconclusive", "request count reached")
    assert result["metrics"]["requests"]["completed"] == 12
    assert result["workload"]["stats"]["requests_issued"] == accounted(result)


@pytest.mark.slow
def test_a_request_count_is_exact(probe: type[Probe], run_spec: Any) -> None:
    overshoot = []
    for _ in range(5):
        _, result = run_spec(probe_spec(requests=6, workload={"users": 16, "max_inflight": 8}))
        overshoot.append(result["metrics"]["requests"]["completed"] - 6)
    assert overshoot == [0] * 5


@pytest.mark.slow
def test_failed_requests_count_toward_the_request_limit(probe: type[Probe], tmp_path: Any) -> None:
    raw = small_spec(requests=5, on_error="count", output={"directory": str(tmp_path)},
                     cache={"tiers": [{"name": "bad", "backend": "probe", "capacity": "64MiB",
                                       "options": {"fail_writes": True}}]})
    validate(raw)
    runner = Runner(plan_run(resolve(raw, str(tmp_path))))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    thread.join(10)
    finished = not thread.is_alive()
    runner.request_stop("the test gave up waiting")
    thread.join(30)
    assert finished


def test_a_duration_stops_the_run_and_every_request_is_accounted_for(probe: type[Probe], run_spec: Any) -> None:
    spec = probe_spec(0.002, duration=0.5, workload={"users": 8, "max_inflight": 2})
    del spec["requests"]
    state, result = run_spec(spec)
    assert state.stop_reason == "duration reached"
    assert result["metrics"]["window"]["measured_s"] >= 0.5
    assert result["workload"]["stats"]["requests_issued"] == accounted(result) > 0


def test_warm_up_is_excluded_from_the_metrics(probe: type[Probe], run_spec: Any) -> None:
    spec = probe_spec(warmup=0.5, requests=5, workload={"users": 4, "max_inflight": 1})
    spec["cache"]["tiers"][0]["capacity"] = "1GiB"  # not turned over in 0.5 s: warm, not yet steady
    _, result = run_spec(spec)
    measured_writes = result["metrics"]["tiers"]["probe"]["write"]["ops"]
    assert 0 < measured_writes < probe.writes  # the tier saw the warm-up's writes; the metrics did not
    assert result["metrics"]["requests"]["completed"] == 5
    assert result["declaration"]["tiers"]["cache_state"]["value"] == "warm"


def test_generation_pacing_delays_completion_without_holding_a_worker(probe: type[Probe], run_spec: Any) -> None:
    workload = {"users": 4, "max_inflight": 1, "generation": 10,
                "options": {"profiles": {"chatbot": {"context": [16, 16], "generate": [20, 20], "think_s": [0, 0]}}}}
    state, result = run_spec(probe_spec(requests=4, workload=workload))
    e2e = result["metrics"]["latency_ms"]["end_to_end"]
    assert e2e["min"] >= 20 * 10  # 20 tokens at 10 ms each, after the storage work
    assert state.worker_count == 1  # four users generating at once on one worker


def test_qos_slas_judge_the_service_latency_not_the_generation_pacing(probe: type[Probe], run_spec: Any) -> None:
    """60 tokens at 10 ms: every reply takes >= 600 ms end to end, beyond every class's p95 target; the
    storage path (a DRAM-speed probe) is well inside them, and that is what the SLA verdict judges."""
    workload = {"users": 4, "max_inflight": 2, "generation": 10,
                "options": {"profiles": {"chatbot": {"context": [16, 16], "generate": [60, 60], "think_s": [0, 0]}}}}
    _, result = run_spec(probe_spec(requests=8, workload=workload))
    qos = {name: c for name, c in result["metrics"]["qos"].items() if c["requests"]}
    assert qos
    for name, verdict in qos.items():
        assert verdict["latency_ms"]["min"] >= 600
        assert verdict["service_latency_ms"]["p95"] < verdict["latency_ms"]["min"] - 500
        assert verdict["sla_met"] is (verdict["service_latency_ms"]["p95"] <= verdict["sla_p95_ms"]
                                      and verdict["service_latency_ms"]["p99"] <= verdict["sla_p99_ms"]), name
    assert any(verdict["sla_met"] for verdict in qos.values())


def test_without_generation_pacing_end_to_end_is_the_service_latency(probe: type[Probe], run_spec: Any) -> None:
    """A response ends when its storage work does, not when the scheduler (or the drain) gets round to it."""
    workload = {"users": 4, "max_inflight": 2, "generation": "none"}
    _, result = run_spec(probe_spec(requests=12, workload=workload))
    histograms = result["metrics"]["histograms"]
    assert histograms["end_to_end_by_qos"] == histograms["service_by_qos"]


def test_open_loop_arrivals_do_not_wait_for_completions(probe: type[Probe], run_spec: Any) -> None:
    arrival = {"process": "poisson", "rate": 400}
    spec = probe_spec(0.02, duration=0.5, workload={"users": 1, "max_inflight": 1, "options": {"arrival": arrival}})
    del spec["requests"]
    _, result = run_spec(spec)
    requests = result["metrics"]["requests"]
    issued = result["workload"]["stats"]["requests_issued"]
    assert issued > 2 * requests["completed"] + 5  # a closed-loop user would have waited for each one
    assert issued == accounted(result)
    assert result["declaration"]["workload"]["arrival_process"]["value"] == "poisson 400.0/s"


def test_a_closed_loop_user_has_one_request_outstanding(probe: type[Probe], run_spec: Any) -> None:
    spec = probe_spec(0.02, duration=0.3, workload={"users": 1, "max_inflight": 1})
    del spec["requests"]
    _, result = run_spec(spec)
    requests = result["metrics"]["requests"]
    assert result["workload"]["stats"]["requests_issued"] == requests["completed"] + requests["unfinished"]
    assert requests["unfinished"] <= 1


def test_a_storage_error_stops_the_run_with_its_cause(probe: type[Probe], run_spec: Any) -> None:
    spec = small_spec(cache={"tiers": [{"name": "bad", "backend": "probe", "capacity": "64MiB",
                                        "options": {"fail_writes": True}}]})
    state, result = run_spec(spec)
    assert state.status == "failed"
    assert result["run"]["status"] == "failed"
    assert result["run"]["error"].startswith("tier 'bad': write of '")
    assert result["run"]["error"].endswith("' failed: Input/output error [errno 5]")
    # With on_error: count the run goes on (a request limit would never be reached: bounded by time here).
    spec = spec | {"on_error": "count", "duration": 0.3}
    del spec["requests"]
    state, result = run_spec(spec)
    assert state.status == "degraded" and result["metrics"]["requests"]["failed"] > 0


def test_the_timeseries_covers_the_measured_window_to_its_end(probe: type[Probe], run_spec: Any) -> None:
    spec = probe_spec(0.02, duration=1.3, workload={"users": 2, "max_inflight": 1}, output={"interval": 0.5})
    del spec["requests"]
    _, result = run_spec(spec)
    series = result["timeseries"]
    assert all(point["interval_s"] > 0 for point in series)
    assert sum(point["interval_s"] for point in series) == pytest.approx(result["metrics"]["window"]["measured_s"],
                                                                          abs=0.05)
    assert sum(point["requests"] for point in series) == result["metrics"]["requests"]["completed"]
