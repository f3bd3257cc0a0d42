"""``verify: true``: every read is checked byte for byte, a corrupted entry is caught and named, the check
costs what it costs in its own figure, and no tier combination loses or changes a byte.

What stands in for a stored checksum: an entry's bytes are a pure function of
its key and offset (``kvbench_core.contracts.payload``: a seeded noise pool plus an
``(entry id, block index)`` stamp in every 512-byte block), so a verified read
regenerates exactly what must come back and compares every byte, which no
checksum collision can fool and no header has to carry.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from testkit import registered
from tiny_spec import run_cli

from kvbench_core.cli import main
from kvbench_core.contracts.backend import BackendContext, ByteSource, IOTiming
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.contracts.workload import DEFAULT_QOS, Read, Request
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.engine.run.executor import RequestExecutor

REPO = Path(__file__).resolve().parents[2]

nvme = pytest.importorskip("kvbench_nvme.backend", reason="the kvbench-nvme plugin is not installed")

#: Bytes read back and verified over every tier combination (printed at the end, in docs/RELIABILITY.md).
VERIFIED: dict[str, int] = {}


def run_spec(tmp_path: Path, spec: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
    """``kvbench run`` in-process; (exit code, stderr, the result document)."""
    code, stdout, stderr = run_cli(tmp_path, spec)
    results = sorted(Path(spec["output"]["directory"]).glob("*.json"))
    assert len(results) == 1, (code, stdout, stderr)
    return code, stderr, json.loads(results[0].read_text())


def verify_spec(tmp_path: Path, tiers: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """tiny-1b entries of 0.4-1.5 MiB from multi-turn users with shared prefixes, verify on."""
    spec: dict[str, Any] = {
        "version": 1, "name": "verify", "seed": 11, "verify": True,
        "model": {"name": "tiny-1b"},
        "requests": 48,
        "workload": {"users": 4, "max_inflight": 2, "generation": "none", "options": {
            "profiles": {"chatbot": {"context": [16, 64], "generate": [1, 80], "think_s": [0, 0]}},
            "profile_mix": {"chatbot": 1},
            "multi_turn": {"turn_tokens": [8, 24]},
            "prefix_caching": {"prefix_tokens": [8, 24], "prompts": 3, "probability": 0.7}}},
        "cache": {"tiers": tiers},
        "output": {"directory": str(tmp_path / "out"), "progress": "off"},
    }
    spec.update(copy.deepcopy(top))
    return spec


# -- a corrupted file is caught ------------------------------------------------------------------------

def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x5A]))


def nvme_tier(tmp_path: Path, name: str = "nvme", *, transfer_size: str = "64KiB") -> Tier:
    options = {"path": str(tmp_path / name), "fsync": False, "drop_cache": False, "transfer_size": transfer_size}
    backend = nvme.NVMeBackend(options, BackendContext(tier_name=name, run_id=f"t{uuid.uuid4().hex[:6]}"))
    backend.open()
    return Tier(name, backend, capacity=64 << 20, description=backend.describe())


@dataclass
class OneTierCache:
    telemetry: Telemetry
    pool: NoisePool
    tier: Tier
    cache: MultiTierCache


@pytest.fixture
def nvme_cache(tmp_path: Path) -> Iterator[OneTierCache]:
    """A measuring cache over one nvme tier (64 KiB pieces), cleared and closed after the test."""
    telemetry = Telemetry(list(DEFAULT_QOS))
    telemetry.start_measuring()
    pool = NoisePool(seed=3, pool_bytes=1 << 20, max_piece=1 << 20)
    tier = nvme_tier(tmp_path)
    cache = MultiTierCache([tier], telemetry, pool.payload)
    yield OneTierCache(telemetry, pool, tier, cache)
    cache.clear()
    tier.backend.close()


def test_a_byte_flipped_on_disk_between_write_and_read_is_a_mismatch_at_its_piece(nvme_cache: OneTierCache) -> None:
    pool, cache = nvme_cache.pool, nvme_cache.cache
    size, flipped_at = 300_000, 200_123  # 64 KiB pieces: the flip is in the piece at 196608
    for key in ("intact", "damaged"):
        assert cache.put(key, size) == "nvme"
    flip_byte(nvme_cache.tier.backend.path_of("damaged"), flipped_at)

    sinks = {key: VerifySink(pool, key, np.empty(pool.max_piece, dtype=np.uint8)) for key in ("intact", "damaged")}
    for key, sink in sinks.items():
        assert cache.get(key, sink) == "nvme"
    assert (sinks["intact"].mismatches, sinks["intact"].first_bad_offset) == (0, None)
    assert sinks["damaged"].mismatches == 1
    assert sinks["damaged"].first_bad_offset == flipped_at // (64 << 10) * (64 << 10)


def test_the_executor_counts_the_mismatch_with_its_key_and_tier(nvme_cache: OneTierCache) -> None:
    telemetry, cache = nvme_cache.telemetry, nvme_cache.cache
    executor = RequestExecutor(cache, telemetry, bytes_per_token=4096, decode_batch=32, pool=nvme_cache.pool,
                               verify=True)
    cache.put("prefix-a", 40 * 4096)
    cache.put("prefix-b", 40 * 4096)
    flip_byte(nvme_cache.tier.backend.path_of("prefix-b"), 0)
    request = Request(user_id=0, seq=0, qos="interactive", context_tokens=40, generate_tokens=0,
                      reads=(Read("prefix-a", 40, "prefix"), Read("prefix-b", 40, "prefix")))
    executor.execute(request)
    assert telemetry.integrity_errors == [{"tier": "nvme", "key": "prefix-b", "first_bad_offset": 0}]
    assert telemetry.verified_bytes == 2 * 40 * 4096


class CorruptingNVMe(nvme.NVMeBackend):
    """The directory tier, except that every file is damaged on disk right after it is written: what a
    failing drive, a buggy filesystem or another process would do between kvbench's write and read."""

    name = "nvme-corrupting"
    FLIP_AT: ClassVar[int] = 4321

    def write(self, key: str, source: ByteSource) -> IOTiming:
        timing = super().write(key, source)
        flip_byte(self.path_of(key), min(self.FLIP_AT, source.size - 1))
        return timing


class _CorruptingPlugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {CorruptingNVMe.name: CorruptingNVMe}


@pytest.fixture
def corrupting_backend() -> Iterator[str]:
    """Register the corrupting tier as a plugin for this test only."""
    with registered(_CorruptingPlugin(), "test-corrupting-nvme"):
        yield CorruptingNVMe.name


def test_a_run_over_a_corrupting_tier_names_the_keys_and_fails(tmp_path: Path, corrupting_backend: str) -> None:
    tiers = [{"name": "dram", "backend": "cpu", "capacity": "1MiB"},
             {"name": "disk", "backend": corrupting_backend, "capacity": "256MiB",
              # every new entry through write, the method that damages it (not write_pipelined's path)
              "options": {"path": str(tmp_path / "disk"), "fsync": False, "drop_cache": False,
                          "pipeline_writes": False}}]
    code, stderr, result = run_spec(tmp_path, verify_spec(tmp_path, tiers))

    assert code == 5, stderr
    errors = result["metrics"]["verify"]["integrity_errors"]
    assert errors > 0
    assert stderr.strip() == f"kvbench: error: {errors} verified reads returned bytes different from what was written"
    mismatches = result["metrics"]["verify"]["mismatches"]
    assert mismatches and {m["tier"] for m in mismatches} == {"disk"}
    assert all(m["key"] and m["first_bad_offset"] == 0 for m in mismatches)  # 4321 lies in the first 1 MiB piece
    assert result["metrics"]["tiers"]["disk"]["reads_served"] >= len({m["key"] for m in mismatches})
    assert not (tmp_path / "disk").exists()
    # The result says so too (issue #28 §2: it said completed, errors [], checks passed, and check exited 0)
    assert (result["run"]["status"], result["run"]["status_rule"]) == ("failed", "integrity")
    assert result["errors"] and {e["op"] for e in result["errors"]} == {"verify"}
    assert result["checks"]["passed"] is False
    assert any(v.startswith("verify_integrity:") for v in result["checks"]["violations"])
    (path,) = sorted((tmp_path / "out").glob("*.json"))
    assert main(["check", str(path), "--json"]) != 0


# -- verify's cost is its own figure ----------------------------------------------------------------------

class _SlowClock:
    """``time.perf_counter`` plus 1000 s for every verified piece: verification that is (on this clock)
    enormously slow, so wherever its time lands in the result is unmistakable, with no real waiting."""

    STEP = 1000.0

    def __init__(self) -> None:
        self.real = time.perf_counter
        self.offset = 0.0

    def __call__(self) -> float:
        return self.real() + self.offset


def test_verify_time_is_reported_apart_from_the_device_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _SlowClock()
    consume = VerifySink.consume

    def slow_consume(self: VerifySink, offset: int, data: memoryview) -> None:
        consume(self, offset, data)
        clock.offset += clock.STEP

    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(VerifySink, "consume", slow_consume)
    tiers = [{"name": "nvme", "backend": "nvme", "capacity": "256MiB",
              "options": {"path": str(tmp_path / "nvme"), "fsync": False, "drop_cache": False}}]
    # One request at a time: the fake clock jumps for the whole process, so a read in flight on another
    # worker would (rightly) count the jump as its own wall-clock device time.
    spec = verify_spec(tmp_path, tiers, requests=20)  # a p95 needs 20 for "completed" (exit 0)
    spec["workload"]["max_inflight"] = 1
    code, stderr, result = run_spec(tmp_path, spec)
    assert code == 0, stderr

    verify = result["metrics"]["verify"]
    read = result["metrics"]["tiers"]["nvme"]["read"]["latency_ms"]
    pieces = round(verify["seconds"] / clock.STEP)
    assert pieces >= 1 and verify["bytes_verified"] > 0
    assert read["device"]["max"] < clock.STEP * 1000, "verification leaked into the device time"
    assert read["total"]["max"] >= clock.STEP * 1000, "the slow verification was not timed at all"


# -- nothing is lost, over every tier combination -----------------------------------------------------------

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    from redis_servers import require_redis, start_redis

    require_redis()
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server.port
    server.stop()


@pytest.fixture
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from s3_servers import fake_aws_environment

    fake_aws_environment(monkeypatch, tmp_path)


def tier_for(kind: str, capacity: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if kind == "cpu":
        return {"name": "dram", "backend": "cpu", "capacity": capacity}
    if kind == "gpu":
        if not HAS_TORCH:
            pytest.skip("torch is not installed")
        return {"name": "hbm", "backend": "gpu", "capacity": capacity, "options": {"device": "cpu"}}
    if kind == "nvme":
        return {"name": "nvme", "backend": "nvme", "capacity": capacity,
                "options": {"path": str(tmp_path / "nvme"), "fsync": False, "drop_cache": False,
                            "transfer_size": "256KiB", "queue_depth": 2}}
    if kind == "redis":
        port = request.getfixturevalue("redis_port")
        return {"name": "redis", "backend": "redis", "capacity": capacity,
                "options": {"host": "127.0.0.1", "port": port, "part_size": "512KiB"}}
    if kind == "s3":
        url = request.getfixturevalue("s3_url")
        request.getfixturevalue("aws_environment")
        return {"name": "s3", "backend": "s3", "capacity": capacity,
                "options": {"endpoint_url": url, "bucket": f"kvb-{uuid.uuid4().hex[:10]}", "create_bucket": True,
                            "addressing_style": "path", "part_size": "256KiB", "max_concurrency": 2,
                            "max_attempts": 1}}
    raise AssertionError(kind)


#: Each a waterfall, fastest first.  Upper tiers are small, so entries cascade through every tier.
COMBINATIONS = [
    ("cpu",), ("nvme",), ("cpu", "nvme"),
    pytest.param(("redis",), marks=pytest.mark.redis), pytest.param(("cpu", "redis"), marks=pytest.mark.redis),
    # moto, the S3 server, is slow: its combinations run with the slow tests.
    pytest.param(("s3",), marks=[pytest.mark.s3, pytest.mark.slow]),
    pytest.param(("nvme", "s3"), marks=[pytest.mark.s3, pytest.mark.slow]),
    pytest.param(("cpu", "nvme", "s3"), marks=[pytest.mark.s3, pytest.mark.slow]),
    pytest.param(("cpu", "redis", "s3"), marks=[pytest.mark.redis, pytest.mark.s3, pytest.mark.slow]),
    pytest.param(("gpu", "cpu", "nvme"), marks=pytest.mark.slow),
]
CAPACITIES = ["3MiB", "6MiB", "512MiB"]


@pytest.mark.parametrize("kinds", COMBINATIONS, ids=lambda kinds: "->".join(kinds))
def test_every_byte_written_reads_back_exactly(tmp_path: Path, request: pytest.FixtureRequest,
                                               kinds: tuple[str, ...]) -> None:
    capacities = CAPACITIES[-len(kinds):] if len(kinds) > 1 else CAPACITIES[-1:]
    tiers = [tier_for(kind, capacity, request, tmp_path) for kind, capacity in zip(kinds, capacities, strict=True)]
    code, stderr, result = run_spec(tmp_path, verify_spec(tmp_path, tiers))
    assert code == 0, stderr

    metrics = result["metrics"]
    verify = metrics["verify"]
    assert verify["integrity_errors"] == 0 and verify["mismatches"] == []
    names = [tier["name"] for tier in tiers]
    served = metrics["cache"]["reads_served_by_tier"]
    assert all(served.get(name, 0) > 0 for name in names), f"a tier was never read back: {served}"
    demoted = metrics["cache"]["demotions_bytes"]
    for upper, lower in itertools.pairwise(names):
        assert demoted.get(f"{upper}->{lower}", 0) > 0, f"nothing cascaded {upper} -> {lower}: {demoted}"
    # Every byte the workload read was checked: the tiers' reads minus the demotions' own reads.
    read_bytes = sum(metrics["tiers"][name]["read"]["bytes"] for name in names)
    assert verify["bytes_verified"] == read_bytes - sum(demoted.values()) > 0
    assert verify["seconds"] > 0
    if "nvme" in kinds:
        assert not (tmp_path / "nvme").exists()
    VERIFIED["->".join(kinds)] = verify["bytes_verified"]


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if VERIFIED:
        total = sum(VERIFIED.values())
        detail = ", ".join(f"{kinds} {nbytes / 2**20:.1f} MiB" for kinds, nbytes in VERIFIED.items())
        print(f"\nverified and intact: {total / 2**20:.1f} MiB over {len(VERIFIED)} tier combinations ({detail})")
