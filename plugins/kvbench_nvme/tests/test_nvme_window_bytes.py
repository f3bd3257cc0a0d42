"""The window's claimed bytes are what this process moved while the window was open (#28 §1).

A llama3.1-8b-sized run (128 KiB per token: entries of 128-256 MiB, requests of several seconds, one
entry after another) over a small DRAM tier that demotes to an O_DIRECT nvme tier: the window's nvme
bytes, booked by time, are compared with the process's own block-layer counters (``/proc/self/io``)
sampled when the window opens and when it closes.  Booked per request, the window claimed 29-49 % of
what the process moved in it (requests begun in warm-up or ending in the drain were elsewhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from testkit import registered

from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.engine.run.runner import Runner
from kvbench_core.filetiers.diskstats import DiskCounters, process_io
from kvbench_core.results.result import build_result
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run


class WindowProbe:
    """Samples ``/proc/self/io`` when the window opens (the hook) and when it closes (the drain's start)."""

    def __init__(self) -> None:
        self.marks: dict[str, DiskCounters] = {}

    @hookimpl
    def kvbench_measurement_started(self, run: Any) -> None:
        self.marks["open"] = process_io()

    def progress(self, point: dict[str, Any]) -> None:
        if point.get("phase") == "drain":
            self.marks["close"] = process_io()


def spec(tmp_path: Path) -> dict[str, Any]:
    return {"version": 1, "name": "window-bytes", "seed": 7, "model": {"name": "llama3.1-8b"},
            "warmup": 1.0, "duration": 4.0, "drain_timeout": 1.0,
            "workload": {"users": 2, "max_inflight": 2,
                         "options": {"profiles": {"chatbot": {"context": [1024, 2048], "generate": [1, 16],
                                                              "think_s": [0, 0]}},
                                     "profile_mix": {"chatbot": 1}, "multi_turn": {"turn_tokens": [64, 256]}}},
            "cache": {"tiers": [{"name": "dram", "backend": "cpu", "capacity": "512MiB"},
                                {"name": "nvme", "backend": "nvme", "capacity": "16GiB",
                                 "options": {"path": str(tmp_path / "tier"), "direct": True,
                                             "transfer_size": "4MiB"}}]},
            "output": {"progress": "off", "directory": str(tmp_path / "out")}}


@pytest.mark.slow
def test_the_windows_nvme_bytes_are_the_process_io_while_it_was_open(tmp_path: Path) -> None:
    raw = spec(tmp_path)
    validate(raw)
    runner = Runner(plan_run(resolve(raw, str(tmp_path))))
    probe = WindowProbe()
    runner.on_progress = probe.progress
    with registered(probe, "test-window-probe"):
        state = runner.run()
    assert state.crash is None, state.stop_reason
    result = build_result(state, raw)
    nvme = result["metrics"]["tiers"]["nvme"]
    if not nvme["describe"].get("direct"):
        pytest.skip("the nvme tier could not open its directory with O_DIRECT here")
    moved = probe.marks["close"] - probe.marks["open"]
    claimed = {op: nvme[op]["device"]["window"]["bytes"] for op in ("read", "write")}
    assert claimed["write"] > 256 << 20  # entries were demoted to nvme inside the window
    assert claimed["write"] == pytest.approx(moved.write_bytes, rel=0.10)
    if moved.read_bytes > 64 << 20:  # reads of demoted entries, when the workload made some in the window
        assert claimed["read"] == pytest.approx(moved.read_bytes, rel=0.10)
    assert result["checks"]["passed"], result["checks"]["violations"]
    # the series' last points carry what the device moved then (they showed 0 B while GBs moved)
    series = result["timeseries"]
    assert sum(p["tiers"].get("nvme", {}).get("write_bytes", 0) for p in series) == claimed["write"]
