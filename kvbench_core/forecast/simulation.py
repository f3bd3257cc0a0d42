"""The forecast's discrete-event simulation: the run's own request stream, cache and scheduling on simpy's
clock, each tier a queue in front of its fitted service model (``fit.py``).

What is the engine's, unchanged: the workload source (its per-user RNG streams, so the same requests),
``RequestExecutor`` and ``MultiTierCache`` (the same reads, writes, hits, demotions and evictions, over
``ModelTier`` backends), the backlog limit and the worker pool with its QoS priority, think time after a
response, generation time after storage.  What the simulation adds: time.  A request's executor runs as
a greenlet (``steps.py``) that stops at each operation the cache issues; the operation waits for a free
server at its tier and holds it for its service time, then the cache goes on.  A persistent tier's
servers are shared by every client; a volatile tier (DRAM) is each client's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.errors import ForecastRefused, MissingDependency
from kvbench_core.contracts.workload import Request
from kvbench_core.engine.cache.cache_types import EvictionPolicy, Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.engine.run.arrivals import backlog_limit
from kvbench_core.engine.run.executor import RequestExecutor
from kvbench_core.engine.run.setup import build_source, preload
from kvbench_core.forecast.fit import TierModel
from kvbench_core.forecast.model_tier import ModelTier, SizedSource
from kvbench_core.forecast.steps import SimLock, Stepper, pause
from kvbench_core.runspec.plan import RunPlan, users_for_client
from kvbench_core.scaleout.clients import client_seed


def simpy_module() -> Any:
    """simpy, imported when a forecast runs (the ``forecast`` extra)."""
    try:
        return importlib.import_module("simpy")
    except ImportError as error:
        raise MissingDependency("kvbench forecast needs simpy: pip install 'kvbench[forecast]'") from error


@dataclass
class Tally:
    """What the measured window of the simulation saw (requests issued after warm-up, ended before its end)."""

    window_s: float
    service: dict[str, LatencyHistogram]
    queue_wait: LatencyHistogram = field(default_factory=LatencyHistogram)
    requests: int = 0
    write_failed: int = 0
    dropped: int = 0
    context_tokens: int = 0
    generated_tokens: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    misses: int = 0
    tier_bytes: dict[str, dict[str, int]] = field(default_factory=dict)
    tier_ops: dict[tuple[str, str], int] = field(default_factory=dict)  # operations per (tier, op) in the window


@dataclass
class Window:
    start: float
    end: float

    def holds(self, begin: float, finish: float) -> bool:
        return begin >= self.start and finish <= self.end


class Simulation:
    """One forecast: ``plan`` (with its what-ifs applied) on ``clients`` clients over the fitted ``models``."""

    def __init__(self, plan: RunPlan, models: dict[str, TierModel], *, clients: int,
                 capacities: dict[str, float], overhead_s: float = 0.0) -> None:
        self.simpy = simpy_module()
        self.env = self.simpy.Environment()
        self.plan, self.models, self.clients, self.capacities = plan, models, clients, capacities
        duration = plan.window.duration_s
        if duration is None:
            raise ForecastRefused("forecast: the spec has no duration (a request-limited run): give one with "
                                  "--set duration=60s")
        self.window = Window(plan.window.warmup_s, plan.window.warmup_s + duration)
        self.tally = Tally(window_s=duration, service={name: LatencyHistogram() for name in plan.qos})
        self.shared = {name: self.simpy.Resource(self.env, capacity=model.servers)
                       for name, model in models.items() if not model.volatile}
        self.priority = {name: cls.priority for name, cls in plan.qos.items()}
        self.overhead_s = overhead_s  # a request's storage time outside its operations (fit.request_overhead_s)

    def run(self) -> Tally:
        for index in range(self.clients):
            self._start_client(index)
        self.env.run(until=self.window.end)
        return self.tally

    # -- one client: its source, cache, backlog and workers --------------------------------------------------
    def _start_client(self, index: int) -> None:
        plan = self.plan if index == 0 else self.plan.for_client(
            seed=client_seed(self.plan.seed, index), clients_total=self.clients, directory_of={})
        users = users_for_client(plan.workload.users, plan.workload.users_scope, self.clients, index)
        source = build_source(plan, users)
        tiers = [Tier(name=t.name, backend=ModelTier(t.name), capacity=self.capacities[t.name],
                      cold_after=t.cold_after) for t in plan.enabled_tiers]
        telemetry = Telemetry(list(plan.qos), clock=lambda: self.env.now)
        cache = MultiTierCache(tiers, telemetry, lambda key, size: SizedSource(size),
                               policy=EvictionPolicy(**plan.eviction), promotion=plan.promotion,
                               clock=lambda: self.env.now, entry_lock=lambda: SimLock(self.env),
                               pause=pause)
        bytes_per_token = plan.model.bytes_per_token_all_ranks
        preload(source, cache, 1, bytes_per_token)  # not measured, as in a run
        workers = self.simpy.PriorityResource(self.env, capacity=plan.workers(users))
        client = _Client(executor=RequestExecutor(cache, telemetry, bytes_per_token, plan.workload.decode_batch),
                         telemetry=telemetry, workers=workers,
                         devices={name: self.shared[name] if name in self.shared
                                  else self.simpy.Resource(self.env, capacity=model.servers)
                                  for name, model in self.models.items()})
        client.backlog = self.simpy.Resource(self.env, capacity=backlog_limit(client.workers.capacity))
        if any(tier.cold_after is not None for tier in tiers):
            self.env.process(self._cold_mover(cache, client))
        if source.open_loop:
            self.env.process(self._arrivals(source, client, users))
        else:
            for user in range(users):
                self.env.process(self._user(source, client, user))

    def _cold_mover(self, cache: MultiTierCache, client: _Client) -> Generator[Any, Any, None]:
        """The runner's tick: every output interval, entries idle past a tier's ``cold_after`` move down, their
        copies charged to the tiers as any operation is (no worker is held: the runner's cold mover does it)."""
        while True:
            yield self.env.timeout(self.plan.output.interval_s)
            yield from self._steps(Stepper(cache.demote_cold, client.telemetry), client)

    def _user(self, source: Any, client: _Client, user: int) -> Generator[Any, Any, None]:
        """A closed-loop user: wait for room in the backlog, issue, wait for the response, think, again.  Its
        latencies start when it was ready, before the wait for room, as the engine's do."""
        while True:
            ready = self.env.now
            slot = client.backlog.request()
            yield slot
            request = source.next_request(user)
            if request is None:
                client.backlog.release(slot)
                return
            yield from self._serve(request, client, slot, ready)
            yield self.env.timeout(request.think_s)

    def _arrivals(self, source: Any, client: _Client, users: int) -> Generator[Any, Any, None]:
        """Open loop: each request at its own arrival offset; one that finds the backlog full is dropped.  The
        source is asked for user ``turn % users``'s next request, as the engine's ``OpenLoopArrivals`` asks."""
        turn = 0
        while (request := source.next_request(turn % max(1, users))) is not None:
            turn += 1
            due = float(request.arrival_s or 0.0)  # from the start of issuing, warm-up included, as the engine's
            if due > self.window.end:
                return
            yield self.env.timeout(max(0.0, due - self.env.now))
            if client.backlog.count >= client.backlog.capacity:
                self.tally.dropped += self.window.holds(due, due)
                continue
            slot = client.backlog.request()
            self.env.process(self._serve(request, client, slot))

    def _serve(self, request: Request, client: _Client, slot: Any,
               ready: float | None = None) -> Generator[Any, Any, None]:
        env = self.env
        enqueued = env.now
        began = enqueued if ready is None else ready
        worker = client.workers.request(priority=-self.priority.get(request.qos, 0))
        yield worker
        client.backlog.release(slot)
        started = env.now
        stepper = Stepper(lambda: client.executor.execute(request, book=False), client.telemetry)
        outcome = yield from self._steps(stepper, client)
        yield env.timeout(self.overhead_s)
        served = env.now
        client.workers.release(worker)
        yield env.timeout(request.generate_tokens * self.plan.workload.generation_s_per_token)
        if self.window.holds(enqueued, env.now):
            self._book(request, outcome, stepper.outcomes(outcome), began, started, served)

    def _steps(self, stepper: Stepper, client: _Client) -> Generator[Any, Any, Any]:
        """Drive one request's cache work: each operation held at its tier for its service time, each lock
        wait until the lock is free; returns the executor's outcome."""
        env = self.env
        steps = stepper.steps()
        try:
            while True:
                kind, *what = next(steps)
                if kind == "wait":  # for an entry's lock
                    yield what[0]
                    continue
                if kind == "sleep":  # for a busy LRU entry to free up
                    yield env.timeout(what[0])
                    continue
                tier, op, nbytes = what
                service = self.models[tier].op(op).service_s(nbytes)
                device = client.devices[tier].request()
                yield device
                yield env.timeout(service)
                client.devices[tier].release(device)
                if self.window.start <= env.now <= self.window.end:
                    booked = self.tally.tier_bytes.setdefault(tier, {"read": 0, "write": 0})
                    booked[op] += nbytes
                    self.tally.tier_ops[tier, op] = self.tally.tier_ops.get((tier, op), 0) + 1
        except StopIteration as done:
            return done.value

    def _book(self, request: Request, outcome: Any, outcomes: list[str | None], began: float, started: float,
              served: float) -> None:
        tally = self.tally
        if outcome.write_failed:
            tally.write_failed += 1
            return
        tally.requests += 1
        tally.service[request.qos].add(served - began)
        tally.queue_wait.add(started - began)
        tally.context_tokens += request.context_tokens
        tally.generated_tokens += request.generate_tokens
        for tier in outcomes:
            if tier is None:
                tally.misses += 1
            else:
                tally.hits[tier] = tally.hits.get(tier, 0) + 1


@dataclass
class _Client:
    executor: RequestExecutor
    telemetry: Telemetry
    workers: Any
    devices: dict[str, Any]
    backlog: Any = None
