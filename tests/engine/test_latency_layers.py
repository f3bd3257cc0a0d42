"""L4 adds up: host + device is the operation's total, for every tier and every operation (docs/metrics.md).

Host is everything of a tier operation that is not waiting on the device, so the split leaves no untracked
remainder and the verdict's service-time shares add up.  Before, the nvme tier's host was only the work it
named (fills, consumes, fadvise), and total - (host + device) was 1-5 % of a quickstart's nvme total."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import HAS_NVME, small_spec

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.engine.measure.opstats import OpStats


def test_host_is_total_minus_device_whatever_part_of_it_the_backend_named() -> None:
    stats = OpStats()
    stats.add(IOTiming(total=1.0, host=0.2, device=0.5, nbytes=10), 0.0, 1.0)  # 0.3 s named by nobody
    stats.add(IOTiming(total=0.4, host=0.4, device=0.0, nbytes=10), 1.0, 1.4)  # a memory tier: all host
    assert (stats.host.total, stats.device.total, stats.total.total) == (pytest.approx(0.9), 0.5, 1.4)
    assert stats.host.max == pytest.approx(0.5)


def assert_layers_add_up(result: dict[str, Any]) -> list[str]:
    """Every tier operation's host + device histogram sums equal its total's, and so do the reported means."""
    seen = []
    for name, tier in result["metrics"]["tiers"].items():
        for op in ("read", "write"):
            figures = tier[op]
            if not figures["ops"]:
                continue
            seen.append(f"{name} {op}")
            hists, means = figures["histograms"], {k: v["mean"] for k, v in figures["latency_ms"].items()
                                                   if k in ("total", "host", "device")}
            assert hists["host"]["count"] == hists["device"]["count"] == hists["total"]["count"] == figures["ops"]
            assert hists["host"]["total"] + hists["device"]["total"] == pytest.approx(hists["total"]["total"],
                                                                                      rel=1e-9), (name, op)
            assert means["host"] + means["device"] == pytest.approx(means["total"], abs=2e-6), (name, op, means)
    return seen


@pytest.mark.skipif(not HAS_NVME, reason="the kvbench-nvme plugin is not installed")
def test_every_tier_operation_of_a_run_splits_into_host_and_device_exactly(run_spec: Any, tmp_path: Path) -> None:
    spec = small_spec(requests=40, cache={"tiers": [
        {"name": "dram", "backend": "cpu", "capacity": "256KiB"},
        {"name": "disk", "backend": "nvme", "capacity": "256MiB",
         "options": {"path": str(tmp_path / "tier"), "fsync": False, "queue_depth": 1}}]})
    _, result = run_spec(spec)
    seen = assert_layers_add_up(result)
    assert {"dram write", "disk write", "disk read"} <= set(seen), seen
