"""The cold mover never holds the scheduler's loop (issue #29).

It ran on the loop, between a tick's interval and its progress line, checking its time budget only between
demotions: one demotion that took seconds (a multi-GiB entry uploaded to S3, specs/nvme-s3-cold.yaml) held
the loop, and the window's close with it, for all of them (a 20 s window measured 25.5 s, exit 8).  Here the
tier below takes 3 s to write any entry and the window lasts 1 s: the loop goes on ticking and issuing while
the demotion runs on the mover's thread, the window is its duration, and the demotion, finished in the
drain, is the drain's by time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import small_spec
from testkit import registered

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import ByteSource, IOTiming
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.engine.run.runner import Runner
from kvbench_core.results.result import build_result
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run

WRITE_S = 3.0
DURATION_S = 1.0
INTERVAL_S = 0.1


class SlowWrites(CPUMemoryBackend):
    """DRAM whose every write takes ``WRITE_S`` more, as device time: the slow tier a cold entry moves to."""

    name = "slowwrites"
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False, "properties": {}}
    writes_started: ClassVar[list[float]] = []

    def write(self, key: str, source: ByteSource) -> IOTiming:
        self.writes_started.append(time.perf_counter())
        time.sleep(WRITE_S)
        timing = super().write(key, source)
        return IOTiming(timing.total + WRITE_S, timing.host, timing.device + WRITE_S, timing.nbytes, timing.commands)


class _Plugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"slowwrites": SlowWrites}


@pytest.fixture
def slow_tier_below() -> Iterator[None]:
    SlowWrites.writes_started.clear()
    with registered(_Plugin(), "test-cold-mover"):
        yield


def test_a_demotion_longer_than_the_window_does_not_hold_the_loop(slow_tier_below: None, tmp_path: Path) -> None:
    # Two users thinking 0.1 s store a few dozen entries of under 2 MiB in the window: the DRAM tier never
    # fills, so only the cold mover writes to the slow tier (an eviction would be a worker's 3 s write).
    spec = small_spec(duration=DURATION_S, drain_timeout=2 * WRITE_S,
                      cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "256MiB"},
                                       {"name": "slow", "backend": "slowwrites", "capacity": "64MiB",
                                        "cold_after": "0.05s"}]},
                      workload={"users": 2, "mode": "prefill-only",
                                "options": {"no_reads": True, "profiles": {"chatbot": {"think_s": [0.1, 0.1]}}}},
                      output={"directory": str(tmp_path), "interval": INTERVAL_S})
    del spec["requests"]
    validate(spec)
    runner = Runner(plan_run(resolve(spec, str(tmp_path))))
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(runner.run()), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    state = out[0]
    result = build_result(state, spec)
    metrics = result["metrics"]
    assert SlowWrites.writes_started, "no cold entry was demoted"
    first = SlowWrites.writes_started[0]
    assert first < state.measure_end, "the demotion began after the window"
    assert len(SlowWrites.writes_started) == 1  # no demotion starts after the window; one was in flight
    # The loop went on while the demotion ran: it ticked every interval and requests finished.
    series = result["timeseries"]
    assert len(series) >= 4 and max(p["interval_s"] for p in series) < 5 * INTERVAL_S, series
    assert sum(p["requests"] for p in series if p["t_s"] > first - state.measure_start) > 0
    assert metrics["window"]["measured_s"] == pytest.approx(DURATION_S, abs=1e-3)
    assert result["checks"]["passed"], result["checks"]["violations"]
    # The demotion ended in the drain: its write is the drain's, by time, none of it the window's.
    write = metrics["tiers"]["slow"]["write"]["device"]
    assert write["window"]["bytes"] == 0 and write["drain"]["bytes"] > 0
    assert metrics["drain"]["cancelled_in_flight"] is False
    assert state.occupancy_at_end["slow"]["entries"] == 1  # it landed before the cache was cleared
