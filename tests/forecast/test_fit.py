"""The forecast's fit (kvbench_core/forecast/fit.py): a tier's servers are the concurrency it was measured
at, and its measured latency is divided by the queueing that concurrency adds back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.forecast.fit import fit_tiers, measured_in_flight


def figures(ops: int, latency_s: float, nbytes: int = 1 << 20) -> dict[str, Any]:
    histogram = LatencyHistogram()
    for _ in range(ops):
        histogram.add(latency_s)
    return {"ops": ops, "bytes": ops * nbytes, "histograms": {"total": histogram.to_dict()}}


def result(tiers: dict[str, dict[str, Any]], window_s: float = 10.0) -> dict[str, Any]:
    return {"metrics": {"window": {"measured_s": window_s}, "tiers": tiers}}


@pytest.mark.parametrize(("reads", "writes", "workers", "servers"), [
    (100, 0, 4, 1),   # 100 x 50 ms in 10 s: 0.5 in flight -> 1 server though 4 workers could reach it
    (300, 100, 4, 2),  # (300 + 100) x 50 ms in 10 s: 2.0 in flight, reads and writes on one device -> 2
    (600, 0, 2, 2),   # 3.0 in flight, but only 2 workers: never more servers than workers
])
def test_a_tiers_servers_are_its_measured_in_flight_rounded_up(reads: int, writes: int, workers: int,
                                                               servers: int) -> None:
    tier = {"backend": "nvme", "volatile": False, "read": figures(reads, 0.05)}
    if writes:
        tier["write"] = figures(writes, 0.05)
    in_flight = (reads + writes) * 0.05 / 10.0
    assert measured_in_flight(tier, 10.0) == pytest.approx(in_flight, rel=0.02)  # the bucket's value, 1 %
    model = fit_tiers(result({"nvme": tier}), workers=workers, clients=1)["nvme"]
    assert model.servers == servers
    # the measured 50 ms less the queueing of its in-flight at those servers, 50 / (1 + L / k), where fewer
    # servers than workers let a queue form; as measured where every worker has its server
    queued = 1 + in_flight / servers if servers < workers else 1.0
    assert np.median(model.op("read").pool) == pytest.approx(0.05 / queued, rel=0.02)


def test_a_volatile_tiers_in_flight_is_per_client_and_a_persistent_ones_is_shared() -> None:
    """A 2-client result: its DRAM's operations were two processes' (each its own DRAM), the nvme's one
    device's."""
    tiers = {"dram": {"backend": "cpu", "volatile": True, "read": figures(400, 0.05)},
             "nvme": {"backend": "nvme", "volatile": False, "read": figures(400, 0.05)}}
    models = fit_tiers(result(tiers), workers=4, clients=2)
    assert (models["dram"].in_flight, models["dram"].servers) == (pytest.approx(1.0, rel=0.02), 1)
    assert (models["nvme"].in_flight, models["nvme"].servers) == (pytest.approx(2.0, rel=0.02), 2)
