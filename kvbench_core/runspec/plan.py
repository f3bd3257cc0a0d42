"""The run plan: a validated, resolved spec turned once into frozen, typed parts.

``load_spec`` validates the YAML and resolves its units; ``plan_run`` then looks up every backend, source
and autoscaler class, takes its options as the spec wrote them (validated once, by the composed schema;
the class's base constructor fills its schema's defaults, once, when the run builds it), resolves the
model once, and freezes the lot. A tier's codec choice is validated once too, by ``check_codec_choices``
against the codec's own schema, and its class is looked up when the tier is built. The runner, the
scale-out launchers and the result builder read the plan's fields instead of re-reading, re-checking and
re-defaulting the dict. A plan is picklable (classes by reference), so a client process gets its parent's
plan as it is: the model is not resolved again there, and no option is validated again.

``RunPlan.spec`` is the resolved spec itself, kept for the record: the result embeds it so a run can be
repeated from its result file, and what no engine part reads typed (the declaration, report formats)
is read from it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.plugins import lookup
from kvbench_core.contracts.workload import DEFAULT_QOS, QoSClass
from kvbench_core.runspec.geometry import ResolvedModel, resolve_model

#: ``max_inflight: 0`` ("unlimited"): one worker per user, up to this many threads.
UNLIMITED_WORKERS = 256


class FrozenDict(dict):  # type: ignore[type-arg]
    """A dict that refuses changes: a plan's options and its record cannot be edited under the run.
    A ``dict`` subclass (not a ``MappingProxyType``) so it pickles to client processes and serialises
    as JSON unchanged."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a run plan is frozen: build a new one (dataclasses.replace) instead of editing it")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))  # every value is frozen too, so a plan hashes

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        """A deep copy is a plain, editable dict: what a caller deep-copies, it means to change."""
        return thaw(self)


def freeze(value: Any) -> Any:
    """``value`` with every mapping inside it a ``FrozenDict`` and every list a tuple (``thaw`` undoes both;
    JSON writes a tuple as the list it was)."""
    if isinstance(value, Mapping):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, editable deep copy of a frozen value: dicts and lists again (what YAML and plugins expect)."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(item) for item in value]
    return value


@dataclass(frozen=True)
class PluginChoice:
    """One plugin the spec names: its class, looked up once, and its options as the spec wrote them,
    validated once (the class's base constructor fills its schema's defaults, once, when it is built)."""

    kind: str  # "backend" | "source" | "autoscaler"
    name: str
    cls: type
    options: Mapping[str, Any]
    field: str  # where the spec names it: "cache.tiers[1]", "workload", "autoscaler"

    @classmethod
    def of(cls, kind: str, name: str, options: Mapping[str, Any] | None, field: str,
           name_field: str) -> PluginChoice:
        """Look the plugin up (errors name ``name_field``) for its already validated options.  They stay
        as written: a rule about options given together judges what the spec wrote, not the defaults."""
        return cls(kind, name, lookup(kind, name, path=name_field), freeze(options or {}), field)



@dataclass(frozen=True)
class TierPlan:
    """One tier of the waterfall, top first."""

    index: int
    name: str
    backend: PluginChoice
    capacity: float | str  # bytes, or "auto" (the backend measures it when opened)
    cold_after: float | None
    codec: Mapping[str, Any] | None

    @property
    def enabled(self) -> bool:
        return self.capacity != 0

    @property
    def field(self) -> str:
        return f"cache.tiers[{self.index}]"


@dataclass(frozen=True)
class WindowPlan:
    """When measuring starts and stops, in seconds (engine/measure/window.py enforces it)."""

    warmup_s: float
    duration_s: float | None
    drain_timeout_s: float | None  # None: the default share of the duration
    request_limit: int | None


@dataclass(frozen=True)
class WorkloadPlan:
    source: PluginChoice
    users: int  # for the whole run; ``users_for_client`` gives one client's share
    users_scope: str  # "per_client" | "split"
    mode: str
    decode_batch: int
    max_inflight: int  # 0: unlimited
    generation_s_per_token: float


@dataclass(frozen=True)
class AutoscalerPlan:
    choice: PluginChoice
    max_users: int | None  # None: 64 x the initial users, at least 1024
    stop_when_converged: bool


@dataclass(frozen=True)
class OutputPlan:
    directory: str
    formats: tuple[str, ...]
    interval_s: float
    keep_files: bool
    progress: str
    io_log: str | None
    exit_zero: bool = False  # a degraded or inconclusive run exits 0 (results/status.py, EXIT_ZERO_ALLOWS)
    metrics: Mapping[str, Any] | None = None  # {port, host}: live OpenMetrics (exports/live_metrics.py)


@dataclass(frozen=True)
class RunPlan:
    """Everything one run of a spec needs, resolved once (see the module docstring)."""

    spec: Mapping[str, Any]  # the resolved spec, frozen: the record a result embeds
    spec_dir: str
    seed: int
    model: ResolvedModel
    tiers: tuple[TierPlan, ...]
    eviction: Mapping[str, Any]
    promotion: str
    workload: WorkloadPlan
    autoscaler: AutoscalerPlan | None
    qos: Mapping[str, QoSClass]
    window: WindowPlan
    output: OutputPlan
    payload: str
    verify: bool
    on_error: str
    precondition: Mapping[str, Any] | None
    clients: int  # client processes this plan starts (1 in a client's own plan)
    clients_total: int  # clients of the whole run (a client's plan keeps its run's count)
    trials: int
    trial_pause_s: float
    processes: int = 1  # worker processes this plan starts (``workers.processes``; 1 in a process's own plan)
    shard: Shard | None = None  # in a worker process's plan: which share of the run it drives

    @property
    def enabled_tiers(self) -> tuple[TierPlan, ...]:
        return tuple(tier for tier in self.tiers if tier.enabled)

    def users_for_client(self, client_index: int) -> int:
        if self.shard is not None:  # a worker process drives its share of the run's users, whatever the scope
            return share(self.workload.users, self.shard.count, self.shard.index)
        return users_for_client(self.workload.users, self.workload.users_scope, self.clients_total, client_index)

    def workers(self, users: int) -> int:
        """Worker threads of one client driving ``users`` (the autoscaler's ceiling when it scales)."""
        if self.workload.max_inflight > 0:
            return self.workload.max_inflight
        ceiling = autoscaler_ceiling(self.autoscaler, users) if self.autoscaler else users
        return min(UNLIMITED_WORKERS, ceiling)

    def for_client(self, *, seed: int, clients_total: int, directory_of: Mapping[str, str]) -> RunPlan:
        """The plan one client of a scaled-out run runs: its seed, one client, its tiers' directories
        (``directory_of``: tier name -> that client's directory; see ``scaleout/clients.py``)."""
        tiers = tuple(_with_directory(tier, directory_of.get(tier.name)) for tier in self.tiers)
        spec = thaw(self.spec)
        spec.update(seed=seed, clients=1, clients_total=clients_total)
        for tier, planned in zip(spec["cache"]["tiers"], tiers, strict=True):
            tier["options"] = thaw(planned.backend.options)
        return dataclasses.replace(self, spec=freeze(spec), seed=seed, tiers=tiers, clients=1,
                                   clients_total=clients_total)

    def for_process(self, index: int, *, directory_of: Mapping[str, str]) -> RunPlan:
        """The plan worker process ``index`` of ``workers.processes`` runs: the run's own seed (so its users draw
        the streams they draw in a one-process run), the users whose number is ``index`` modulo the count, that
        share of every tier's capacity, of ``requests`` and of ``max_inflight``, its tiers' directories.  The
        processes together are the one run split, not N runs: see docs/scale-out.md, worker processes."""
        count = self.processes
        part = self.for_client(seed=self.seed, clients_total=1, directory_of=directory_of)
        tiers = tuple(tier if isinstance(tier.capacity, str) else
                      dataclasses.replace(tier, capacity=share(int(tier.capacity), count, index, least=0))
                      for tier in part.tiers)
        workload = dataclasses.replace(part.workload, max_inflight=share(part.workload.max_inflight, count, index,
                                                                         least=0))
        limit = part.window.request_limit
        window = dataclasses.replace(part.window, request_limit=None if limit is None else share(limit, count, index))
        spec = thaw(part.spec)
        spec["workers"] = {"processes": 1}
        for written, planned in zip(spec["cache"]["tiers"], tiers, strict=True):
            written["capacity"] = planned.capacity
        spec["workload"]["max_inflight"] = workload.max_inflight
        if limit is not None:
            spec["requests"] = window.request_limit
        return dataclasses.replace(part, spec=freeze(spec), tiers=tiers, workload=workload, window=window,
                                   processes=1, shard=Shard(index, count))


@dataclass(frozen=True, slots=True)
class Shard:
    """Worker process ``index`` of ``count``: it drives the run's users ``index``, ``index + count``, … ."""

    index: int
    count: int

    def user(self, local: int) -> int:
        """The run's user number of this process's user ``local`` (its pool counts 0 .. n-1)."""
        return local * self.count + self.index


def share(total: int, count: int, index: int, *, least: int = 1) -> int:
    """Part ``index`` of ``total`` split ``count`` ways, the first parts taking the remainder (the parts add up
    to ``total``; part ``index`` of the users is how many of ``0 .. total-1`` are ``index`` modulo ``count``)."""
    base, extra = divmod(total, count)
    return max(least, base + (1 if index < extra else 0))


def _with_directory(tier: TierPlan, directory: str | None) -> TierPlan:
    option = tier.backend.cls.directory_option
    if directory is None or not option:
        return tier
    options = freeze({**tier.backend.options, option: directory})
    return dataclasses.replace(tier, backend=dataclasses.replace(tier.backend, options=options))


def users_for_client(users: int, scope: str, clients_total: int, client_index: int) -> int:
    """Users one client (process or MPI rank) drives: all of ``users``, or its share under ``split``."""
    if scope == "split" and clients_total > 1:
        return share(users, clients_total, client_index)
    return max(1, users)


def autoscaler_ceiling(plan: AutoscalerPlan, users: int) -> int:
    """The most users the autoscaler may reach from ``users``."""
    return plan.max_users or max(users * 64, 1024)


def plan_run(resolved: Mapping[str, Any]) -> RunPlan:
    """The plan of a validated, resolved spec (``spec.loader.resolve``); each plugin is looked up once and
    the model is resolved once, here.  A client's plan comes from ``RunPlan.for_client``, not from here."""
    workload, output, cache = resolved["workload"], resolved["output"], resolved["cache"]
    autoscaler = resolved.get("autoscaler")
    return RunPlan(
        spec=freeze(resolved), spec_dir=resolved["spec_dir"], seed=int(resolved["seed"]),
        model=plan_model(resolved["model"], resolved["spec_dir"]),
        tiers=tuple(_tier_plan(i, tier) for i, tier in enumerate(cache["tiers"])),
        eviction=freeze(cache["eviction"]), promotion=cache["promotion"],
        workload=WorkloadPlan(
            source=PluginChoice.of("source", workload["source"], workload["options"], "workload",
                                   "workload.source"),
            users=int(workload["users"]), users_scope=workload["users_scope"], mode=workload["mode"],
            decode_batch=int(workload["decode_batch"]), max_inflight=int(workload["max_inflight"]),
            generation_s_per_token=float(workload["generation_ms_per_token"]) / 1e3),
        autoscaler=None if not autoscaler else AutoscalerPlan(
            choice=PluginChoice.of("autoscaler", autoscaler["name"], autoscaler["options"], "autoscaler",
                                   "autoscaler.name"),
            max_users=autoscaler.get("max_users"), stop_when_converged=bool(autoscaler["stop_when_converged"])),
        qos=FrozenDict(qos_classes(resolved.get("qos"))),
        window=WindowPlan(warmup_s=float(resolved["warmup"]), duration_s=resolved.get("duration"),
                          drain_timeout_s=resolved.get("drain_timeout"), request_limit=resolved.get("requests")),
        output=OutputPlan(directory=output["directory"], formats=tuple(output["formats"]),
                          interval_s=float(output["interval"]), keep_files=bool(output["keep_files"]),
                          progress=output["progress"], io_log=output.get("io_log"),
                          exit_zero=bool(output.get("exit_zero")),
                          metrics=freeze(output["metrics"]) if output.get("metrics") else None),
        payload=resolved["payload"], verify=bool(resolved["verify"]), on_error=resolved["on_error"],
        precondition=freeze(resolved["precondition"]) if resolved.get("precondition") else None,
        clients=int(resolved["clients"]), clients_total=int(resolved["clients"]),
        trials=int(resolved["trials"]), trial_pause_s=float(resolved["trial_pause"]),
        processes=int(resolved["workers"]["processes"]))


def _tier_plan(index: int, tier: Mapping[str, Any]) -> TierPlan:
    field = f"cache.tiers[{index}]"
    return TierPlan(index=index, name=tier["name"],
                    backend=PluginChoice.of("backend", tier["backend"], tier["options"], field,
                                            f"{field}.backend"),
                    capacity=tier["capacity"], cold_after=tier.get("cold_after"),
                    codec=freeze(tier["codec"]) if tier.get("codec") else None)


def qos_classes(targets: Mapping[str, Any] | None) -> dict[str, QoSClass]:
    """The seed's QoS table, with the spec's per-class ``qos.<class>.p95/p99`` targets over it."""
    classes = dict(DEFAULT_QOS)
    for name, target in (targets or {}).items():
        base = classes[name]
        classes[name] = QoSClass(name, base.priority, float(target.get("p95", base.p95_target_s)),
                                 float(target.get("p99", base.p99_target_s)))
    return classes


def plan_model(model: Mapping[str, Any], spec_dir: str) -> ResolvedModel:
    """The run's model, resolved once; an error names the field at fault (``model.tp`` when the geometry
    resolves but the TP degree does not divide it)."""
    name, config = model.get("name"), model.get("config")
    if config and not os.path.isabs(config):
        config = os.path.join(spec_dir, config)
    # A name plus a config picks that model from a multi-model file (the LMCache calculator's json).
    target, config_of = name or config, config if name else None
    tp = model["tp"]
    try:
        return resolve_model(target, model.get("dtype"), tp, config=config_of)
    except (SpecError, InputFileError) as error:
        field = "model.config" if config else "model.name"
        if tp != 1:  # only on this error path: is the geometry itself at fault, or the TP degree?
            try:
                resolve_model(target, model.get("dtype"), 1, config=config_of)
                field = "model.tp"
            except (SpecError, InputFileError):
                pass
        raise type(error)(f"{field}: {error}") from None
