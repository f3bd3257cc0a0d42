"""One run of a resolved spec: set up tiers and workload, drive users, measure, clean up.

Data flows one way: resolved spec -> tiers + cache -> workload source ->
scheduler (users, QoS queue, ``max_inflight`` workers, generation pacing) ->
cache -> telemetry -> result.  The runner never blocks a thread per user: a
user is an entry in the event heap; generation time is a timed event, not a
sleeping worker.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.autoscaler import Autoscaler, Decision, TelemetrySample
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable, StorageError, UserError
from kvbench_core.contracts.plugins import get_plugin_manager, lookup, require_dependencies
from kvbench_core.contracts.validation import validate_or_raise
from kvbench_core.contracts.workload import DEFAULT_QOS, Request, WorkloadContext, WorkloadSource
from kvbench_core.engine.executor import RequestExecutor
from kvbench_core.engine.factory import create_backend
from kvbench_core.engine.payload import NoisePool
from kvbench_core.engine.precondition import precondition_bottom_tier
from kvbench_core.engine.scheduler import EventHeap, PriorityRequestQueue
from kvbench_core.engine.telemetry import Telemetry
from kvbench_core.engine.waterfall import EvictionPolicy, MultiTierCache, Tier
from kvbench_core.spec.geometry import resolve_model

UNLIMITED_WORKERS = 256  # max_inflight 0 = "unlimited": one worker per user up to this many threads


@dataclass
class RunState:
    """What the run did, for the result builder and the lifecycle hooks."""

    run_id: str
    spec: dict[str, Any]
    client_index: int = 0
    tiers: list[Tier] = field(default_factory=list)
    model: Any = None
    bytes_per_token: int = 0
    source: WorkloadSource | None = None
    telemetry: Telemetry | None = None
    status: str = "running"  # completed | interrupted | failed
    stop_reason: str = ""
    error: UserError | None = None
    measure_start_wall: float | None = None
    measure_end_wall: float | None = None
    measure_start: float | None = None
    measure_end: float | None = None
    autoscaling: list[dict[str, Any]] = field(default_factory=list)
    autoscaler_summary: dict[str, Any] = field(default_factory=dict)
    preload: dict[str, Any] = field(default_factory=dict)
    precondition: dict[str, Any] | None = None
    workload_samples: dict[str, list[int]] = field(default_factory=lambda: {"context": [], "generate": [],
                                                                            "prefix": []})
    unfinished_requests: int = 0
    plugin_sections: dict[str, Any] = field(default_factory=dict)
    users_final: int = 0
    worker_count: int = 0
    crash: BaseException | None = None  # an unexpected exception (a bug), re-raised after the result is saved


class Runner:
    """Executes a resolved spec once (one trial, one client)."""

    def __init__(self, spec: dict[str, Any], *, run_id: str | None = None, client_index: int = 0,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 barrier: Callable[[], None] | None = None) -> None:
        self.spec = spec
        self.state = RunState(run_id=run_id or new_run_id(spec), spec=spec, client_index=client_index)
        self.on_progress = on_progress
        self.barrier = barrier
        self._stop = threading.Event()
        self._stop_lock = threading.Lock()
        self._lock = threading.Lock()
        self._inflight = 0
        self._completed_in_window = 0

    # -- control ---------------------------------------------------------------------------------------
    def request_stop(self, reason: str, status: str | None = None, error: UserError | None = None) -> None:
        """Stop issuing requests (signal handler, fatal error, autoscaler convergence, duration)."""
        with self._stop_lock:
            if not self._stop.is_set():
                self.state.stop_reason = reason
                if status:
                    self.state.status = status
                if error is not None:
                    self.state.error = error
            self._stop.set()
        self._events.wake() if hasattr(self, "_events") else None

    @property
    def stopped(self) -> bool:
        """Whether a stop was requested (signal, error, duration, convergence)."""
        return self._stop.is_set()

    # -- set-up ------------------------------------------------------------------------------------------
    def _build_tiers(self, workers: int) -> list[Tier]:
        tiers: list[Tier] = []
        io_log = self._io_log()
        for index, tier_spec in enumerate(self.spec["cache"]["tiers"]):
            if tier_spec["capacity"] == 0:
                continue
            context = BackendContext(tier_name=tier_spec["name"], run_id=self.state.run_id, seed=self.spec["seed"],
                                     concurrency=workers, keep=self.spec["output"]["keep_files"], io_log=io_log,
                                     extra={"client_index": self.state.client_index})
            backend = create_backend(tier_spec, context, path=f"cache.tiers[{index}]")
            backend.open()
            tiers.append(Tier(name=tier_spec["name"], backend=backend,
                              capacity=self._capacity(tier_spec, backend, index),
                              cold_after=tier_spec.get("cold_after"), description=backend.describe()))
            self.state.tiers = tiers
        return tiers

    def _io_log(self) -> Any:
        path = self.spec["output"].get("io_log")
        if not path:
            return None
        from kvbench_core.engine.iolog import IOLog

        self._log = IOLog(path)  # closed (flushed) in _cleanup, before the next trial reopens the path
        return self._log

    @staticmethod
    def _capacity(tier_spec: dict[str, Any], backend: Any, index: int) -> float:
        if tier_spec["capacity"] != "auto":
            return float(tier_spec["capacity"])
        detected = backend.capacity_bytes()
        if detected is None:
            raise BackendUnavailable(
                f"cache.tiers[{index}].capacity: 'auto' is not supported by backend '{tier_spec['backend']}' "
                "here; declare a size such as 8GiB")
        return float(detected)

    def _build_source(self, bytes_per_token: int) -> WorkloadSource:
        workload = self.spec["workload"]
        cls = lookup("source", workload["source"], path="workload.source")
        validate_or_raise(workload["options"], cls.options_schema, root="workload.options")
        require_dependencies(cls, what=f"workload source '{workload['source']}'")
        qos = {name: DEFAULT_QOS[name] for name in DEFAULT_QOS}
        context = WorkloadContext(seed=self.spec["seed"], users=self._users(), bytes_per_token=bytes_per_token,
                                  mode=workload["mode"], decode_batch=workload["decode_batch"],
                                  duration_s=self.spec.get("duration"), qos_classes=qos,
                                  spec_dir=self.spec.get("spec_dir", "."))
        return cls(workload["options"], context)

    def _users(self) -> int:
        return users_for_client(self.spec["workload"], self.spec.get("clients_total", 1), self.state.client_index)

    def _build_autoscaler(self) -> Autoscaler | None:
        config = self.spec.get("autoscaler")
        if not config:
            return None
        cls = lookup("autoscaler", config["name"], path="autoscaler.name")
        validate_or_raise(config["options"], cls.options_schema, root="autoscaler.options")
        max_users = config.get("max_users") or max(self._users() * 64, 1024)
        return cls(config["options"], initial_users=self._users(), max_users=max_users)

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> RunState:
        state = self.state
        spec = self.spec
        config = spec["model"].get("config")
        if config and not os.path.isabs(config):
            config = os.path.join(spec.get("spec_dir", "."), config)
        name = spec["model"].get("name")
        # A name plus a config picks that model from a multi-model file (the LMCache calculator's json).
        model = resolve_model(name or config, spec["model"].get("dtype"), spec["model"].get("tp", 1),
                              config=config if name else None)
        state.model = model
        # Every TP rank stores its own object, so the storage sees all ranks' bytes per token.
        state.bytes_per_token = model.bytes_per_token_all_ranks
        max_inflight = spec["workload"]["max_inflight"]
        autoscaler = self._build_autoscaler()
        users = self._users()
        worker_cap = autoscaler.max_users if autoscaler else users
        workers = max_inflight if max_inflight > 0 else min(UNLIMITED_WORKERS, worker_cap)
        state.worker_count = workers
        telemetry = Telemetry(list(DEFAULT_QOS))
        state.telemetry = telemetry
        self._events = EventHeap()
        try:
            # The workload first: a malformed trace is reported before any tier is opened or written.
            source = self._build_source(state.bytes_per_token)
            state.source = source
            tiers = self._build_tiers(workers)
            max_piece = max(int(t.backend.transfer_size) for t in tiers)
            pool = NoisePool(spec["seed"], pool_bytes=32 << 20, max_piece=max(max_piece, 1 << 20),
                             kind=spec.get("payload", "random"))
            policy = EvictionPolicy(**spec["cache"]["eviction"])
            cache = MultiTierCache(tiers, telemetry, pool.payload, policy=policy, promotion=spec["cache"]["promotion"])
            self.cache = cache
            executor = RequestExecutor(cache, telemetry, state.bytes_per_token, spec["workload"]["decode_batch"],
                                       pool=pool, verify=spec["verify"])
            self._preload(source, cache, workers)
            if spec.get("precondition") and not self._stop.is_set():
                state.precondition = precondition_bottom_tier(tiers[-1], pool, spec["precondition"], self._stop)
            if self.barrier is not None:
                self.barrier()
            if not self._stop.is_set():
                self._drive(source, executor, autoscaler, users, workers)
            if autoscaler is not None:
                state.autoscaler_summary = autoscaler.summary()
        except UserError as error:
            self.request_stop(str(error), status="failed", error=error)
            if state.telemetry and state.telemetry.measuring:
                state.telemetry.stop_measuring()
        finally:
            self._cleanup()
        if state.status == "running":
            state.status = "completed"
        return state

    def _preload(self, source: WorkloadSource, cache: MultiTierCache, workers: int) -> None:
        """Store the source's ahead-of-time entries (RAG ingestion, decode-only population); not measured."""
        from concurrent.futures import ThreadPoolExecutor

        writes = list(source.preload())
        if not writes:
            return
        start = time.perf_counter()
        nbytes = 0
        with ThreadPoolExecutor(max_workers=max(1, min(workers, 16))) as pool:
            futures = [pool.submit(cache.put, w.key, max(1, w.tokens) * self.state.bytes_per_token) for w in writes]
            for future in futures:
                future.result()
        nbytes = sum(max(1, w.tokens) * self.state.bytes_per_token for w in writes)
        self.state.preload = {"entries": len(writes), "bytes": nbytes, "seconds": time.perf_counter() - start}

    def _drive(self, source: WorkloadSource, executor: RequestExecutor, autoscaler: Autoscaler | None,
               users: int, workers: int) -> None:
        spec = self.spec
        state = self.state
        telemetry = state.telemetry
        assert telemetry is not None
        queue = PriorityRequestQueue()
        events = self._events
        generation_s_per_token = spec["workload"]["generation_ms_per_token"] / 1000.0
        on_error = spec["on_error"]
        warmup = spec.get("warmup") or 0.0
        duration = spec.get("duration")
        request_limit = spec.get("requests")
        interval = float(spec["output"]["interval"])
        qos_priority = {name: cls.priority for name, cls in DEFAULT_QOS.items()}
        active_users = set(range(users))
        open_loop = source.open_loop
        cold_tiers = any(t.cold_after is not None for t in self.cache.tiers)

        def worker() -> None:
            while True:
                item = queue.get()
                if item is None:
                    return
                request, enqueued = item
                started = time.perf_counter()
                try:
                    outcome = executor.execute(request)
                except StorageError as error:
                    telemetry.record_request_failed()
                    if on_error == "stop":
                        self.request_stop(f"storage error: {error}", status="failed", error=error)
                    events.push(time.perf_counter(), "failed", request)
                except Exception as error:  # a kvbench bug: stop, keep the partial result, re-raise later
                    state.crash = error
                    self.request_stop(f"internal error: {type(error).__name__}: {error}", status="failed")
                    events.push(time.perf_counter(), "failed", request)
                else:
                    served = time.perf_counter()  # storage work done: the service latency ends here
                    # ... and the response ends after the simulated generation: that instant, not when the
                    # scheduler gets to the event (up to one wait later, or after the drain), ends e2e.
                    finished = served + request.generate_tokens * generation_s_per_token
                    events.push(finished, "complete",
                                (request, started - enqueued, served - enqueued, finished - enqueued, outcome))
                # Decrement only after the completion event exists, so "nothing in flight" is never seen early.
                with self._lock:
                    self._inflight -= 1

        threads = [threading.Thread(target=worker, name=f"kvbench-worker-{i}", daemon=True) for i in range(workers)]
        for thread in threads:
            thread.start()

        def enqueue(request: Request, now: float) -> None:
            with self._lock:
                self._inflight += 1
            if telemetry.measuring:  # the declaration's workload statistics exclude warm-up
                state.workload_samples["context"].append(request.context_tokens)
                state.workload_samples["generate"].append(request.generate_tokens)
                state.workload_samples["prefix"].extend(read.tokens for read in request.reads if read.kind == "prefix")
            queue.put((request, now), qos_priority.get(request.qos, 1), now)

        run_start = time.perf_counter()
        measure_at = run_start + warmup
        measuring = False
        next_tick = run_start + interval
        next_scale = None
        exhausted_users: set[int] = set()
        open_exhausted = False
        if open_loop:
            events.push(run_start, "arrival", None)
        else:
            for user in sorted(active_users):
                events.push(run_start, "issue", user)
        rr_user = 0

        while True:
            now = time.perf_counter()
            if not measuring and now >= measure_at:
                try:  # a hook may block (a tracer attaching): the window opens when it returns
                    get_plugin_manager().hook.kvbench_measurement_started(run=state)
                except UserError as error:
                    self.request_stop(str(error), status="failed", error=error)
                    break
                now = time.perf_counter()
                measuring = True
                telemetry.start_measuring()
                next_tick = now + interval  # intervals of the measured window start with it
                state.measure_start = now
                state.measure_start_wall = time.time()
                next_scale = now + autoscaler.interval_s if autoscaler else None
            if measuring and duration is not None and now >= state.measure_start + duration:
                self.request_stop("duration reached")
            if request_limit is not None and self._completed_in_window >= request_limit:
                self.request_stop("request count reached")
            if self._stop.is_set():
                break
            for kind, payload in events.pop_due(now):
                if kind == "issue":
                    user = payload
                    if user not in active_users:
                        continue
                    request = source.next_request(user)
                    if request is None:
                        exhausted_users.add(user)
                        continue
                    enqueue(request, now)
                elif kind == "arrival":
                    request = source.next_request(rr_user % max(1, len(active_users)))
                    rr_user += 1
                    if request is None:
                        open_exhausted = True
                        continue
                    due = run_start + (request.arrival_s or 0.0)
                    events.push(due, "enqueue", request)
                    events.push(due, "arrival", None)
                elif kind == "enqueue":
                    enqueue(payload, now)
                elif kind in ("complete", "failed"):
                    self._complete(kind, payload, now, measuring, active_users, events)
            if now >= next_tick:
                next_tick = now + interval
                point = telemetry.close_interval(len(active_users), {"occupancy": self.cache.occupancy(),
                                                                      "queue": len(queue)})
                if cold_tiers:
                    self.cache.demote_cold()
                if self.on_progress:
                    self.on_progress(self._progress(point, now, measuring, warmup, duration))
            if autoscaler and measuring and next_scale is not None and now >= next_scale:
                next_scale = now + autoscaler.interval_s
                sample = self._sample(telemetry, now, len(active_users))
                decision = autoscaler.decide(sample)
                self._apply_decision(decision, sample, active_users, events, now)
                if decision.converged and spec["autoscaler"].get("stop_when_converged"):
                    self.request_stop(f"autoscaler converged: {decision.reason}")
            all_done = (open_exhausted if open_loop else active_users <= exhausted_users)
            if all_done and self._inflight == 0 and events.pending("complete") == 0 and events.pending("enqueue") == 0:
                self.request_stop("workload exhausted")
                continue
            events.wait(now, min(interval, 0.05) if not measuring else max(0.0, min(next_tick - now, 0.05)))

        # Drain: requests never started are dropped; in-flight storage work finishes (the honest window).
        if self.on_progress and measuring:  # the drain has no intervals of its own: say that it started
            self.on_progress({"phase": "drain"})
        state.unfinished_requests += len(queue.drain())  # completions past the request limit are in already
        queue.close()
        for thread in threads:
            thread.join()
        now = time.perf_counter()
        # Requests whose storage work finished in the drain (and need no more generation time) completed
        # inside the window: count them.  Those still "generating" past its end are unfinished.
        for kind, payload in events.pop_due(now):
            if kind in ("complete", "failed"):
                self._complete(kind, payload, now, measuring, set(), events)
        for kind, payload in events.pop_due(math.inf):
            if kind in ("complete", "failed") and payload is not None:
                state.unfinished_requests += 1
        if measuring:
            # The last, partial interval and the drain get their point too: the series covers the window.
            telemetry.close_interval(len(active_users), {"occupancy": self.cache.occupancy(), "queue": 0})
            telemetry.stop_measuring()
            state.measure_end = now
            state.measure_end_wall = time.time()
            for section in get_plugin_manager().hook.kvbench_measurement_finished(run=state):
                if section:
                    state.plugin_sections.update(section)
        else:
            state.stop_reason = state.stop_reason or "stopped during warm-up"
        state.users_final = len(active_users)

    def _complete(self, kind: str, payload: Any, now: float, measuring: bool, active_users: set[int],
                  events: EventHeap) -> None:
        limit = self.spec.get("requests")
        request = payload if kind == "failed" else payload[0]
        if measuring:
            if limit is not None and self._completed_in_window >= limit:
                # Finished in the same scheduler pass as the one that hit the limit: past it, not counted.
                self.state.unfinished_requests += 1
                return
            # A failed request (on_error: count) is finished too, so a failing tier cannot run forever.
            self._completed_in_window += 1
            if kind == "complete":
                _, queue_wait, service, end_to_end, outcome = payload
                self.state.telemetry.record_request(
                    request.qos, end_to_end, service, queue_wait, outcome.storage_s, request.context_tokens,
                    request.generate_tokens, outcome.decode_tokens_read)
        if not self.state.source.open_loop and request.user_id in active_users:
            events.push(now + request.think_s, "issue", request.user_id)

    def _apply_decision(self, decision: Decision, sample: TelemetrySample, active_users: set[int],
                        events: EventHeap, now: float) -> None:
        # The seed's autoscaling_stats entry: users, throughput, saturation, action (and why)
        self.state.autoscaling.append({"t_s": round(now - (self.state.measure_start or now), 3),
                                       "users_before": len(active_users),
                                       "throughput_tokens_per_s": round(sample.throughput_tokens_per_s, 3),
                                       **decision.as_dict()})
        target = max(1, decision.users)
        current = len(active_users)
        if target > current:
            next_id = max(active_users) + 1 if active_users else 0
            for user in range(next_id, next_id + target - current):
                active_users.add(user)
                events.push(now, "issue", user)
        elif target < current:
            for user in sorted(active_users)[target:]:
                active_users.discard(user)

    def _sample(self, telemetry: Telemetry, now: float, users: int) -> TelemetrySample:
        window = [p for p in telemetry.series if p["t_s"] >= (now - telemetry.window_start) - self._scale_interval()]
        point = window[-1] if window else telemetry.close_interval(users)
        to_s = 1 / 1000.0
        return TelemetrySample(
            t_s=now - (self.state.measure_start or now), users=users, requests=sum(p["requests"] for p in window),
            throughput_tokens_per_s=_mean([p["tokens_per_s"] for p in window]),
            read_bytes_per_s=_mean([p["read_bytes_per_s"] for p in window]),
            write_bytes_per_s=_mean([p["write_bytes_per_s"] for p in window]),
            e2e_p95_s=_worst_per_class(window, "e2e_p95_ms"),
            e2e_p99_s=_worst_per_class(window, "e2e_p99_ms"),
            service_p95_s=_worst_per_class(window, "service_p95_ms"),
            service_p99_s=_worst_per_class(window, "service_p99_ms"),
            sla_p95_s={q: c.p95_target_s for q, c in DEFAULT_QOS.items()},
            sla_p99_s={q: c.p99_target_s for q, c in DEFAULT_QOS.items()},
            storage_p95_s=(point.get("storage_p95_ms") or 0.0) * to_s,
        )

    def _scale_interval(self) -> float:
        config = self.spec.get("autoscaler") or {}
        options = config.get("options", {})
        return float(options.get("interval_s", 10.0 if config.get("name") == "capacity" else 5.0))

    def _progress(self, point: dict[str, Any], now: float, measuring: bool, warmup: float,
                  duration: float | None) -> dict[str, Any]:
        elapsed = now - (self.state.measure_start or now) if measuring else 0.0
        return {"phase": "measure" if measuring else "warmup", "elapsed_s": elapsed, "duration_s": duration,
                "warmup_s": warmup, **point}

    def _cleanup(self) -> None:
        """Remove every entry this run wrote (unless keep_files) and close the tiers."""
        keep = self.spec["output"]["keep_files"]
        cache = getattr(self, "cache", None)
        if cache is not None and not keep:
            try:
                cache.clear()
            except Exception as error:  # a kvbench bug: the tiers still close, the result is still written
                self.state.crash = self.state.crash or error
                self.state.plugin_sections.setdefault("cleanup_errors", []).append(f"cache: {error!r}")
        for tier in self.state.tiers:
            try:
                tier.backend.close()
            except Exception as error:  # cleanup must not hide the run's own outcome
                self.state.plugin_sections.setdefault("cleanup_errors", []).append(f"{tier.name}: {error}")
        log = getattr(self, "_log", None)
        if log is not None:
            log.close()


def _worst_per_class(window: list[dict[str, Any]], field: str) -> dict[str, float]:
    """Per QoS class, the largest of the window's interval values of ``field`` (ms), in seconds."""
    return {q: max(p[field][q] for p in window if q in p.get(field, {})) / 1000.0
            for q in DEFAULT_QOS if any(q in p.get(field, {}) for p in window)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def users_for_client(workload: dict[str, Any], clients_total: int, client_index: int) -> int:
    """Users one client (process or MPI rank) drives: all of ``workload.users``, or its share under ``split``."""
    users = workload["users"]
    if workload["users_scope"] == "split" and clients_total > 1:
        base, extra = divmod(users, clients_total)
        users = base + (1 if client_index < extra else 0)
    return max(1, users)


def new_run_id(spec: dict[str, Any]) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{secrets.token_hex(3)}"
