"""Device bytes are booked by time (#28 §1): each command in the phase it completed in (before the window,
the window, the drain), whatever its request did; request figures stay per request.  The phases add up to
every byte the tiers' commands reported (the ``bytes_by_time`` invariant)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import small_spec

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.contracts.workload import DEFAULT_QOS
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.results.invariants import bytes_by_time

MIB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def window_10_to_20() -> tuple[Telemetry, Clock]:
    """A telemetry whose window opens at 10 s; close it with ``close``."""
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    clock.now = 10.0
    telemetry.start_measuring()
    return telemetry, clock


def close(telemetry: Telemetry, clock: Clock) -> None:
    clock.now = 20.0
    telemetry.close_window()
    telemetry.close_interval(1, end=telemetry.window_close)


def test_a_request_begun_in_warm_up_books_each_command_in_the_phase_it_completed_in() -> None:
    """A multi-second request from 9 s to 21 s moving one MiB per command: under the per-request rule its
    window bytes were 0 (it began in warm-up: booked nowhere); by time, the window has what completed in it."""
    telemetry, clock = window_10_to_20()
    close(telemetry, clock)
    tally = telemetry.begin_request()
    commands = [(MIB, 9.0, 9.5), (MIB, 12.0, 12.5), (MIB, 19.0, 19.9), (MIB, 19.9, 20.4)]
    telemetry.record_op("nvme", "read", IOTiming(11.4, 0.0, 11.4, 4 * MIB, 4), 9.0, 20.4, commands)
    telemetry.end_request()
    telemetry.book(tally, telemetry.bucket(9.0, 21.0))  # the request's own figures: warm-up's, nowhere
    device = {phase: telemetry.device[phase]["nvme"]["read"] for phase in ("warmup", "window", "drain")}
    assert (device["warmup"].bytes, device["window"].bytes, device["drain"].bytes) == (MIB, 2 * MIB, MIB)
    assert device["window"].commands == 2
    assert (device["window"].first_start, device["window"].last_end) == (12.0, 19.9)
    assert telemetry.tiers["nvme"]["read"].ops == 0  # the operation is the request's: not in the window
    assert sum(p["tiers"]["nvme"]["read_bytes"] for p in telemetry.series) == 2 * MIB  # the series agrees


def test_a_command_across_the_open_counts_from_the_open_for_the_bandwidth() -> None:
    telemetry, clock = window_10_to_20()
    telemetry.record_op("nvme", "write", IOTiming(2.0, 0.0, 2.0, MIB), 9.0, 11.0, [(MIB, 9.0, 11.0)])
    close(telemetry, clock)
    window = telemetry.device["window"]["nvme"]["write"]
    assert (window.bytes, window.first_start, window.active_s()) == (MIB, 10.0, 1.0)


def test_a_tier_without_commands_books_its_operation_at_its_end() -> None:
    telemetry, clock = window_10_to_20()
    close(telemetry, clock)
    telemetry.record_op("s3", "write", IOTiming(3.0, 0.0, 3.0, 8 * MIB, 2), 18.0, 21.0)
    assert telemetry.device["window"]["s3"]["write"].bytes == 0
    drain = telemetry.device["drain"]["s3"]["write"]
    assert (drain.bytes, drain.commands) == (8 * MIB, 2)
    assert telemetry.uncommanded_bytes["s3"]["write"] == 8 * MIB


def test_cancelled_partial_work_is_booked_by_time_and_counted() -> None:
    telemetry, clock = window_10_to_20()
    close(telemetry, clock)
    telemetry.record_unfinished("nvme", "write", [(MIB, 19.5, 20.5), (MIB, 20.5, 21.0)], cancelled=True)
    telemetry.record_unfinished("nvme", "read", [(MIB, 19.0, 19.5)], cancelled=False)  # a failed read's command
    assert telemetry.device["window"]["nvme"]["write"].bytes == 0
    drain = telemetry.device["drain"]["nvme"]["write"]
    assert (drain.bytes, drain.cancelled_ops, drain.cancelled_bytes) == (2 * MIB, 1, 2 * MIB)
    assert telemetry.device["window"]["nvme"]["read"].bytes == MIB
    assert telemetry.drain.to_dict()["cancelled_bytes"] == 2 * MIB
    assert telemetry.drain.to_dict()["write_bytes"] == 2 * MIB


def test_only_requests_begun_in_the_window_count_as_cancelled() -> None:
    telemetry, clock = window_10_to_20()
    close(telemetry, clock)
    telemetry.record_request_cancelled(9.0)  # begun in warm-up: not one of the window's
    telemetry.record_request_cancelled(15.0)
    assert telemetry.drain.requests_cancelled == 1


def test_commands_outside_the_window_are_booked_at_once_in_their_phase() -> None:
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    telemetry.record_command_outside("nvme", "write", MIB, 1.0, 2.0)  # preload, warm-up
    assert telemetry.device["warmup"]["nvme"]["write"].bytes == MIB
    clock.now = 10.0
    telemetry.start_measuring()
    assert telemetry.device["warmup"]["nvme"]["write"].bytes == MIB  # the window's open keeps warm-up's


def test_an_operation_of_a_commanded_tier_outside_the_window_is_booked_once() -> None:
    """Its commands were booked as they came (no operation takes them outside the window): the operation,
    which then has none, must not book its bytes a second time (a warm-up write counted twice)."""
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    telemetry.record_command_outside("nvme", "write", MIB, 1.0, 1.5)
    telemetry.record_command_outside("nvme", "write", MIB, 1.5, 2.0)
    telemetry.record_op("nvme", "write", IOTiming(1.0, 0.0, 1.0, 2 * MIB, 2), 1.0, 2.0)
    assert telemetry.device["warmup"]["nvme"]["write"].bytes == 2 * MIB
    assert telemetry.uncommanded_bytes["nvme"]["write"] == 0
    telemetry.record_op("s3", "write", IOTiming(1.0, 0.0, 1.0, MIB, 1), 1.0, 2.0)  # a tier without commands
    assert telemetry.device["warmup"]["s3"]["write"].bytes == MIB


def _metrics() -> dict[str, Any]:
    def op(warmup: int, window: int, drain: int, moved: int) -> dict[str, Any]:
        return {"device": {"warmup": {"bytes": warmup}, "window": {"bytes": window}, "drain": {"bytes": drain},
                           "moved_bytes": moved}}
    return {"tiers": {"nvme": {"read": op(1, 2, 3, 6), "write": op(0, 5, 0, 5)}},
            "drain": {"read_bytes": 3, "write_bytes": 0}}


def test_the_invariant_holds_and_fails_on_a_lost_or_edited_byte() -> None:
    assert all(check.passed for check in bytes_by_time(_metrics()))
    for path, value in ((("tiers", "nvme", "read", "device", "window", "bytes"), 3),
                        (("tiers", "nvme", "write", "device", "moved_bytes"), 6),
                        (("drain", "read_bytes"), 4)):
        edited = copy.deepcopy(_metrics())
        node = edited
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert not all(check.passed for check in bytes_by_time(edited)), path


def test_a_real_run_across_warm_up_and_drain_adds_up(run_spec: Any) -> None:
    """Two DRAM tiers (demotions), a warm-up and a drain: every tier's phases add up to what its recorder
    counted, and the series has the window's bytes."""
    spec = small_spec(warmup=0.3, duration=0.8,
                      cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "8MiB"},
                                       {"name": "dram2", "backend": "cpu", "capacity": "64MiB"}]})
    del spec["requests"]
    _, result = run_spec(spec)
    metrics = result["metrics"]
    checks = list(bytes_by_time(metrics))
    assert checks and all(check.passed for check in checks), [c.line() for c in checks if not c.passed]
    read = metrics["tiers"]["dram"]["read"]["device"]
    assert read["warmup"]["bytes"] > 0 and read["window"]["bytes"] > 0
    for name, tier in metrics["tiers"].items():
        for op in ("read", "write"):
            series = sum((p["tiers"].get(name) or {}).get(f"{op}_bytes", 0) for p in result["timeseries"])
            assert series == tier[op]["device"]["window"]["bytes"]


def test_a_window_with_a_duration_ends_at_its_planned_end_however_late_it_is_closed() -> None:
    """Issue #29: the loop that closes the window may turn late (a loaded machine); from the planned end
    (open + duration) on, what completes is the drain's before anything is closed, the close is the planned
    end, and no interval runs past it."""
    clock = Clock()
    telemetry = Telemetry(list(DEFAULT_QOS), clock=clock)
    clock.now = 10.0
    telemetry.start_measuring(duration_s=10.0)
    telemetry.record_op("nvme", "write", IOTiming(1.0, 0.0, 1.0, MIB, 1), 19.0, 20.0, [(MIB, 19.0, 20.0)])
    telemetry.record_op("nvme", "write", IOTiming(1.0, 0.0, 1.0, MIB, 1), 19.5, 20.5, [(MIB, 19.5, 20.5)])
    clock.now = 20.7
    telemetry.count("stored_entries")  # outside a request, after the planned end: not the window's
    shown = telemetry.close_interval(1)  # a tick after the planned end: the last interval, as it stands there
    assert (shown["t_s"], shown["interval_s"]) == (10.0, 10.0) and not telemetry.series
    clock.now = 21.0  # the loop turns to the close late
    telemetry.close_window()
    telemetry.close_interval(1, end=telemetry.window_close)  # the drain closes it
    telemetry.stop_measuring()
    assert telemetry.window_close == 20.0 and telemetry.drain.seconds == pytest.approx(1.0)
    device = {phase: telemetry.device[phase]["nvme"]["write"].bytes for phase in ("window", "drain")}
    assert device == {"window": MIB, "drain": MIB}
    assert telemetry.tiers["nvme"]["write"].ops == 1 and telemetry.drain.tiers["nvme"]["write"].ops == 1
    assert "stored_entries" not in telemetry.counters
    assert [(p["t_s"], p["interval_s"], p["write_bytes"]) for p in telemetry.series] == [(10.0, 10.0, MIB)]
