"""Time series and throughput names (#16): one meaning per name, bytes booked per device command when it
completes, merged series add counts (never rates over different lengths), per-command latency per tier."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import small_spec

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.contracts.workload import DEFAULT_QOS
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.results.merge import _merge_series


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bytes_are_booked_per_command_in_the_interval_it_completed() -> None:
    """A 4 GiB entry read as four 1 GiB commands over four seconds is 1 GiB/s in each second, not 4 GiB/s
    in the last one, even though the operation is booked after all four intervals closed."""
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    telemetry.start_measuring()
    for second in range(1, 5):
        clock.now = float(second)
        telemetry.close_interval(1)
    commands = [(1 << 30, float(second), second + 0.9) for second in range(4)]
    telemetry.record_op("nvme", "read", IOTiming(3.9, 0.0, 3.9, 4 << 30, 4), 0.0, 3.9, commands)
    assert [p["read_bytes_per_s"] for p in telemetry.series] == [1 << 30] * 4
    assert [p["tiers"]["nvme"]["read_bytes"] for p in telemetry.series] == [1 << 30] * 4
    stats = telemetry.tiers["nvme"]["read"]
    assert (stats.ops, stats.command.count, stats.command_bytes) == (1, 4, 4 << 30)


def test_an_operation_that_started_in_warm_up_is_not_in_the_window() -> None:
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    clock.now = 10.0
    telemetry.start_measuring()
    telemetry.record_op("nvme", "write", IOTiming(1.0, 0.0, 1.0, 4096), 9.5, 10.5, [(4096, 9.5, 10.5)])
    telemetry.record_op("nvme", "write", IOTiming(0.5, 0.0, 0.5, 4096), 10.1, 10.6, [(4096, 10.1, 10.6)])
    stats = telemetry.tiers["nvme"]["write"]
    assert (stats.ops, stats.command.count, stats.bytes) == (1, 1, 4096)


def test_an_intervals_p95_is_over_the_operations_it_books() -> None:
    """Bytes and latency are booked by time, together: an operation that began in warm-up and completed in
    the window has its command's bytes and its latency in the interval it completed in; one that completed
    before the window opened has neither, so a point never shows a p95 beside 0 bytes (review R4)."""
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    clock.now = 10.0
    telemetry.start_measuring()
    telemetry.record_op("redis", "read", IOTiming(1.5, 0.0, 1.5, 4096), 8.0, 9.5, [(4096, 8.0, 9.5)])
    telemetry.record_op("redis", "write", IOTiming(3.0, 0.0, 3.0, 4096), 8.0, 11.0, [(4096, 8.0, 11.0)])
    clock.now = 12.0
    telemetry.close_interval(1)
    row = telemetry.series[-1]["tiers"]["redis"]
    assert row["read_bytes"] == 0 and row["read_p95_ms"] is None
    assert row["write_bytes"] == 4096 and row["write_p95_ms"] == pytest.approx(3000.0, rel=0.02)
    telemetry.record_op("redis", "read", IOTiming(0.2, 0.0, 0.2, 4096), 12.1, 12.3, [(4096, 12.1, 12.3)])
    clock.now = 13.0
    telemetry.close_interval(1)
    row = telemetry.series[-1]["tiers"]["redis"]
    assert row["read_bytes"] == 4096 and row["read_p95_ms"] == pytest.approx(200.0, rel=0.02)


def _client(opened: float, points: list[tuple[float, float, float]]) -> Any:
    """A client's result: its window opened at ``opened`` (wall clock); points (t_s, interval_s, read bytes)."""
    from testkit import document_with

    series = [{"t_s": t, "interval_s": span, "users": 1, "requests": 1, "generated_tokens": 10,
               "context_tokens": 100, "read_bytes": nbytes, "write_bytes": 0,
               "tiers": {"nvme": {"read_bytes": nbytes, "write_bytes": 0}}} for t, span, nbytes in points]
    return document_with(metrics={"window": {"started_at": opened}}, timeseries=series)


def test_merged_points_are_placed_on_one_wall_clock_grid() -> None:
    """#28 §4: merged by position, a 3-client run's timestamps went backwards and its intervals added up to
    14.73 s for a 12.39 s window.  Client b opened 0.5 s after a: each of its points straddles two of the
    grid's intervals and goes half to each; the grid covers the merged window, counts add up exactly, and a
    rate is the interval's summed count over its own length (never a sum of rates)."""
    gb = 1e9
    a = _client(100.0, [(1.0, 1.0, gb), (2.0, 1.0, gb)])
    b = _client(100.5, [(1.0, 1.0, gb), (2.0, 1.0, gb)])
    merged = _merge_series([a, b], {"window": {"started_at": 100.0, "ended_at": 102.5}},
                           {"output": {"interval": 1.0}})
    assert [(p["t_s"], p["interval_s"], p["clients"]) for p in merged] == [(1.0, 1.0, 2), (2.0, 1.0, 2), (2.5, 0.5, 1)]
    assert [p["read_bytes"] for p in merged] == [1.5 * gb, 2 * gb, 0.5 * gb]
    assert merged[-1]["read_bytes_per_s"] == pytest.approx(1 * gb)  # 0.5 GB over its 0.5 s
    assert merged[1]["tiers"]["nvme"]["read_bytes_per_s"] == pytest.approx(2 * gb)
    assert sum(p["requests"] for p in merged) == pytest.approx(4) and sum(p["interval_s"] for p in merged) == 2.5
    assert [p["users"] for p in merged] == [2, 2, 2]  # gauges: both clients were measuring at every end


def test_tokens_per_second_means_one_thing_everywhere(run_spec: Any) -> None:
    spec = small_spec(duration=1.0, output={"interval": 0.25})
    del spec["requests"]
    _, result = run_spec(spec)
    metrics, series = result["metrics"], result["timeseries"]
    assert all("tokens_per_s" not in point for point in series)
    for point in series:
        assert point["generated_tokens_per_s"] == pytest.approx(point["generated_tokens"] / point["interval_s"],
                                                                rel=0.01)
        assert point["context_tokens_per_s"] == pytest.approx(point["context_tokens"] / point["interval_s"],
                                                              rel=0.01)
    assert sum(p["generated_tokens"] for p in series) == metrics["requests"]["generated_tokens"]
    assert sum(p["context_tokens"] for p in series) == metrics["requests"]["context_tokens"]
    headline = metrics["headline"]["avg_throughput_tokens_per_sec"]
    assert headline == pytest.approx(metrics["requests"]["generated_tokens"] / metrics["window"]["measured_s"],
                                     rel=1e-3)


def test_per_command_latency_per_tier_to_p99_99(run_spec: Any) -> None:
    _, result = run_spec(small_spec())
    read = result["metrics"]["tiers"]["dram"]["read"]
    commands = read["command_latency_ms"]
    assert commands["count"] >= read["ops"] > 0  # one memcpy block at least per entry read
    assert {"p50", "p95", "p99", "p99.9", "p99.99"} <= commands.keys()
    assert read["command_bytes"] == read["bytes"]  # every byte of every read is in one of its commands
    assert read["mean_entry_bytes"] == round(read["bytes"] / read["ops"])


def test_the_window_and_its_first_interval_open_at_one_instant() -> None:
    """A clock that moves on every reading (a loaded machine preempting between two readings): the series
    still covers the whole window, so window_series holds (it failed at random on a CI run's 77 ms window)."""
    class Ticking:
        def __init__(self) -> None:
            self.now = 0.0

        def __call__(self) -> float:
            self.now += 0.001
            return self.now

    clock = Ticking()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    telemetry.start_measuring()
    telemetry.close_window()
    telemetry.close_interval(1, end=telemetry.window_close)
    assert telemetry.window_close is not None
    measured = telemetry.window_close - telemetry.window_start
    assert sum(p["interval_s"] for p in telemetry.series) == pytest.approx(measured, abs=5e-4)
