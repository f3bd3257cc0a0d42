"""Replay a recorded KV object set on one storage tier: store all, then load all, and time each object.

The manifest says what to issue (keys, payload sizes, transfer geometry);
the tier is any kvbench backend, built through the same factory a run uses.
A tier that takes a ``transfer_size`` option gets the manifest's max transfer
(or, where one command holds a whole object, the largest object) unless the user
set one, so the replay reissues the recorded command stream.
Payload bytes come from the seeded noise pool and reads are discarded, so
the timing is the tier's, not Python's.

The optional I/O log covers exactly one pass (the first measured iteration),
so its commands join one-to-one with the manifest in ``kvbench score``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, cast

import yaml

from kvbench_core.contracts.backend import DISCARD, BackendContext, IOTiming, StorageBackend
from kvbench_core.contracts.errors import InputFileError, SpecError, StorageError
from kvbench_core.contracts.payload import POOL_BYTES, NoisePool
from kvbench_core.contracts.plugins import lookup
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.iolog import IOLog
from kvbench_core.engine.run.factory import create_backend
from kvbench_core.kvio.commands import OPS
from kvbench_core.kvio.diskcheck import DiskWindow
from kvbench_core.kvio.manifest import KVObject, Manifest
from kvbench_core.kvio.projection import planned_commands, recompute_breakeven
from kvbench_core.runspec.reading import read_spec_file

FORMAT = "kvbench-kvio-replay"
VERSION = 1


def _backend_class(tier: dict[str, Any], where: str) -> type[StorageBackend]:
    return cast(type[StorageBackend], lookup("backend", tier["backend"], path=f"{where}.backend"))


def tier_from_argument(text: str) -> tuple[dict[str, Any], str]:
    """``(tier, where)`` from ``--tier``: an inline YAML/JSON mapping, or a run spec file whose first
    persistent (non-memory) tier is used.  ``where`` names the tier in later errors."""
    if os.path.isfile(text):
        tiers = (read_spec_file(text).get("cache") or {}).get("tiers")
        if not isinstance(tiers, list):
            raise InputFileError(f"{text}: field 'cache.tiers' is missing")
        for index, tier in enumerate(tiers):
            where = f"{text}: cache.tiers[{index}]"
            if not isinstance(tier, dict) or "backend" not in tier:
                raise InputFileError(f"{where}: field 'backend' is missing")
            if not _backend_class(tier, where).volatile:
                return tier, where
        raise InputFileError(f"{text}: cache.tiers has no persistent (non-memory) tier to replay on")
    try:
        tier = yaml.safe_load(text)
    except yaml.YAMLError:
        tier = None
    if not isinstance(tier, dict) or not isinstance(tier.get("backend"), str):
        raise SpecError(f"--tier: expected a tier mapping such as '{{backend: nvme, options: {{path: /mnt/kv}}}}' "
                        f"or a spec file; {text!r} is neither")
    return tier, "--tier"


@dataclass(frozen=True)
class ReplaySettings:
    """How to replay: measured and warm-up passes, objects in flight, and the optional checks."""

    iters: int = 1
    warmup: int = 0
    concurrency: int = 1
    seed: int = 0
    io_log: str | None = None
    diskstats: bool = False
    prefill_tokens_per_sec: float | None = None


class _OnePassLog:
    """Forwards ``record`` to the I/O log only while ``active``: the log then holds exactly one pass."""

    def __init__(self, log: IOLog) -> None:
        self.log = log
        self.active = False
        self.owner_of: Callable[[str], str] | None = None  # set by a codec stage: a segment's entry

    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float,
               requested: int | None = None, align: int | None = None) -> None:
        if self.active:
            owner = None if self.owner_of is None else self.owner_of(key)
            self.log.record(key, op, offset, nbytes, start_s, end_s, requested, align, owner=owner)


def _histogram(timings: list[IOTiming]) -> LatencyHistogram:
    histogram = LatencyHistogram()
    for timing in timings:
        histogram.add(timing.total)
    return histogram


def _phase(backend: StorageBackend, op: str, objects: tuple[KVObject, ...], pool: NoisePool,
           executor: ThreadPoolExecutor) -> tuple[float, list[IOTiming]]:
    """Issue ``op`` on every object; wall seconds and per-object timings (manifest order)."""
    tier = backend.context.tier_name

    def one(obj: KVObject) -> IOTiming:
        try:
            if op == "store":
                return backend.write(obj.key, pool.payload(obj.key, obj.nbytes))
            return backend.read(obj.key, obj.nbytes, DISCARD)
        except OSError as error:
            raise StorageError(tier, op, obj.key, error) from error

    start = time.perf_counter()
    timings = list(executor.map(one, objects))
    return time.perf_counter() - start, timings


def _op_result(objects: tuple[KVObject, ...], seconds: float, timings: list[IOTiming],
               latency: LatencyHistogram) -> dict[str, Any]:
    nbytes = sum(obj.nbytes for obj in objects)
    return {"objects": len(objects), "bytes": nbytes, "seconds": seconds,
            "throughput_bytes_per_s": nbytes / seconds if seconds > 0 else None,
            "tier_commands": sum(t.commands for t in timings), "latency_ms": latency.summary()}


def _load_vs_recompute(breakeven: dict[str, Any], loads: dict[tuple[int, int | None], LatencyHistogram]
                       ) -> dict[str, Any]:
    """Planned break-even bandwidth per object class against the measured median load of that class."""
    rows = []
    for row in breakeven["classes"]:
        load_s = loads[(row["payload_bytes"], row["tokens"])].quantile(0.5) or 0.0
        measured = row["payload_bytes"] / load_s if load_s > 0 else float("inf")
        rows.append({**row, "load_s_p50": load_s, "measured_bytes_per_s": measured,
                     "load_to_recompute": load_s / row["recompute_s"],
                     "faster": "load" if measured > row["breakeven_bytes_per_s"] else "recompute"})
    return {**breakeven, "classes": rows}


def _noise_pool(manifest: Manifest, seed: int, max_piece: int) -> NoisePool:
    """A pool at least as large as the largest object (so no object repeats itself), capped at the
    default; generating the default 64 MiB for a few small objects would dominate a short replay."""
    largest = max((obj.nbytes for obj in manifest.objects), default=0)
    return NoisePool(seed, pool_bytes=min(POOL_BYTES, max(1 << 20, largest)), max_piece=max_piece)


def replay(manifest: Manifest, tier: dict[str, Any], settings: ReplaySettings, *, where: str = "--tier"
           ) -> dict[str, Any]:
    """Store-all-then-load-all ``settings.warmup + settings.iters`` times; the measured passes' report."""
    if settings.iters < 1 or settings.warmup < 0 or settings.concurrency < 1:
        raise SpecError("--iters and --concurrency must be >= 1 and --warmup >= 0")
    if not manifest.objects:
        raise SpecError("the manifest holds no objects to replay")
    rate = settings.prefill_tokens_per_sec
    breakeven = None if rate is None else {  # computed first so that a bad rate fails before any I/O
        "prefill_tokens_per_sec": rate, "classes": recompute_breakeven(manifest, rate)}
    options = dict(tier.get("options") or {})
    cls = _backend_class(tier, where)
    largest = max(max(obj.nbytes for obj in manifest.objects), manifest.geometry.store_header_bytes)
    transfer = manifest.geometry.transfer_for(largest)
    if "transfer_size" in cls.options_schema.get("properties", {}):
        options.setdefault("transfer_size", transfer)
    log = IOLog(settings.io_log, manifest.trace_ids) if settings.io_log else None
    gate = _OnePassLog(log) if log else None
    context = BackendContext(tier_name=str(tier.get("name", tier["backend"])), run_id=f"kvio-{uuid.uuid4().hex[:8]}",
                             seed=settings.seed, concurrency=settings.concurrency, io_log=gate)
    try:
        backend = create_backend({**tier, "options": options}, context, path=where)
        warnings = [] if cls.volatile else _fit_warnings(backend, tier["backend"], manifest, largest, transfer,
                                                         logged=log is not None)
        backend.open()
        try:
            report = _run_passes(backend, manifest, settings, gate, breakeven)
        finally:
            backend.close()
    finally:
        if log:
            log.close()
    return {"format": FORMAT, "version": VERSION, "model": manifest.model, "geometry": manifest.geometry.to_dict(),
            "settings": asdict(settings), **report, "warnings": warnings}


def _fit_warnings(backend: StorageBackend, name: str, manifest: Manifest, largest: int, transfer: int, *,
                  logged: bool) -> list[str]:
    """Where a file or network tier's commands cannot match the projection's (a memory tier's have no geometry)."""
    warnings = []
    if not manifest.geometry.splits_like(backend.transfer_size, largest):
        warnings.append(f"the tier moves {backend.transfer_size} B per command but the manifest's commands "
                        f"need {transfer} B: its commands will not match the projection")
    if logged and manifest.geometry.store_header_bytes:
        # kvbench's tiers store the payload alone; LMCache raw_block writes a header block first
        warnings.append(f"the projection expects a {manifest.geometry.store_header_bytes} B header op before each "
                        f"store, which the {name} tier does not write: `kvbench score` will "
                        "find every store one command short (project with --store-header-bytes 0)")
    return warnings


def _book_pass(manifest: Manifest, passed: dict[str, Any], iterations: list[dict[str, Any]], wall: dict[str, float],
               latency: dict[str, LatencyHistogram],
               loads: dict[tuple[int, int | None], LatencyHistogram]) -> None:
    """One measured pass: its iteration row, its wall time and latencies per op, each load by object size."""
    histograms = {op: _histogram(passed[op][1]) for op in OPS}
    iterations.append({"iteration": len(iterations) + 1,
                       **{op: _op_result(manifest.objects, *passed[op], histograms[op]) for op in OPS}})
    for op in OPS:
        wall[op] += passed[op][0]
        latency[op].merge(histograms[op])
    for obj, timing in zip(manifest.objects, passed["load"][1], strict=True):
        loads[(obj.nbytes, obj.tokens)].add(timing.total)


def _start_pass(index: int, settings: ReplaySettings, gate: _OnePassLog | None, disk: DiskWindow | None) -> bool:
    """Arm the one-pass I/O log and the disk window for the first measured pass; True for a measured one."""
    if gate:
        gate.active = index == settings.warmup
    if disk and index == settings.warmup:
        disk.start()
    return index >= settings.warmup


def _overall(latency: LatencyHistogram, wall: float, payload: int, planned: Counter[int]) -> dict[str, Any]:
    """One op over every measured pass."""
    return {"objects": latency.count, "bytes": payload, "seconds": wall,
            "throughput_bytes_per_s": payload / wall if wall > 0 else None,
            "planned_commands_per_pass": sum(planned.values()), "latency_ms": latency.summary()}


def _run_passes(backend: StorageBackend, manifest: Manifest, settings: ReplaySettings, gate: _OnePassLog | None,
                breakeven: dict[str, Any] | None) -> dict[str, Any]:
    pool = _noise_pool(manifest, settings.seed, backend.transfer_size)
    tier = backend.describe()
    disk = DiskWindow(tier) if settings.diskstats else None
    iterations: list[dict[str, Any]] = []
    latency = {op: LatencyHistogram() for op in OPS}
    wall = dict.fromkeys(OPS, 0.0)
    loads: dict[tuple[int, int | None], LatencyHistogram] = defaultdict(LatencyHistogram)
    with ThreadPoolExecutor(settings.concurrency, thread_name_prefix="kvio-replay") as executor:
        for index in range(settings.warmup + settings.iters):
            measured = _start_pass(index, settings, gate, disk)
            passed = {op: _phase(backend, op, manifest.objects, pool, executor) for op in OPS}
            if measured:
                _book_pass(manifest, passed, iterations, wall, latency, loads)
    if gate:
        gate.active = False
    payload = sum(obj.nbytes for obj in manifest.objects) * settings.iters
    planned = planned_commands(manifest)
    report: dict[str, Any] = {
        "tier": tier,
        "iterations": iterations,
        "overall": {op: _overall(latency[op], wall[op], payload, planned[op]) for op in OPS},
    }
    if breakeven is not None:
        report["load_vs_recompute"] = _load_vs_recompute(breakeven, loads)
    if disk:
        window = {op: Counter({size: n * settings.iters for size, n in planned[op].items()}) for op in OPS}
        report["diskstats"] = disk.report(window["store"], window["load"])
    return report
