"""Shared fixtures for the core tests: a small valid spec, and running one in-process.

Runs use the ``tiny-1b`` geometry (24 KiB/token) with contexts of tens of
tokens, so an entry is well under a megabyte and a run takes a second.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import sigint_reaches_children

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.workload import DEFAULT_QOS
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.engine.run.executor import RequestExecutor
from kvbench_core.engine.run.runner import Runner, RunState
from kvbench_core.results.result import build_result
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.overrides import _deep_merge
from kvbench_core.runspec.plan import plan_run

sigint_reaches_children()  # the signal tests interrupt kvbench children

HAS_NVME = importlib.util.find_spec("kvbench_nvme") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None

#: One small profile for every user: contexts of 16-64 tokens, decode of up to 3 batches, no think time.
SMALL_WORKLOAD: dict[str, Any] = {
    "profiles": {"chatbot": {"context": [16, 64], "generate": [1, 96], "think_s": [0, 0]}},
    "profile_mix": {"chatbot": 1},
    "multi_turn": {"turn_tokens": [8, 32]},
    "prefix_caching": {"prefix_tokens": [4, 12]},
}


def small_spec(**extra: Any) -> dict[str, Any]:
    """A valid raw spec: tiny-1b, one 64 MiB DRAM tier, small synthetic users; ``extra`` deep-merges."""
    spec = {
        "version": 1,
        "name": "t",
        "seed": 7,
        "model": {"name": "tiny-1b"},
        "requests": 30,
        "workload": {"users": 4, "max_inflight": 2, "options": copy.deepcopy(SMALL_WORKLOAD)},
        "cache": {"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64MiB"}]},
        "output": {"progress": "off"},
    }
    return _deep_merge(spec, extra)


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server shared by a test module (skips with the install line without moto)."""
    from s3_servers import require_moto, start_moto

    require_moto()
    server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server.url
    server.stop()


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """Write a spec dict as YAML in ``tmp_path`` and return its path."""

    def write(spec: dict[str, Any], name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


@pytest.fixture
def run_spec(tmp_path: Path) -> Callable[..., tuple[RunState, dict[str, Any]]]:
    """Validate, resolve and run a raw spec in-process; returns the run state and its result document."""

    def run(raw: dict[str, Any]) -> tuple[RunState, dict[str, Any]]:
        raw = _deep_merge({"output": {"directory": str(tmp_path / "results")}}, raw)
        validate(raw)
        state = Runner(plan_run(resolve(raw, str(tmp_path)))).run()
        if state.crash is not None:
            raise state.crash
        return state, build_result(state, raw)

    return run


def memory_executor(capacity: int = 64 << 20, *, bytes_per_token: int = 1024,
                    decode_batch: int = 32) -> RequestExecutor:
    """A request executor over one DRAM tier named ``dram``, telemetry already measuring."""
    telemetry = Telemetry(list(DEFAULT_QOS))
    telemetry.start_measuring()
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test"))
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=4 << 20)
    cache = MultiTierCache([Tier("dram", backend, capacity)], telemetry, pool.payload)
    return RequestExecutor(cache, telemetry, bytes_per_token, decode_batch)
