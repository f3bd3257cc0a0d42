"""A worker the drain gives up on cannot change the figures the result is read from (issue #28).

The drain cancels what is in flight at its limit and gives each operation ``CANCEL_GRACE_S`` to reach a
command boundary; a worker still inside one (a stuck server, a long rollback) is abandoned and may go on
issuing commands while the result is read.  It did: random ``bytes_by_time`` / ``drain_bytes`` failures in
runs with ``workers_abandoned: true`` (the nixl objects tier, docs/tiers/nixl.md).  Here the tier's write
blocks outside any command boundary until the run's cleanup begins, long after the give-up, then issues one
more command and ends cancelled: without the seal its commands land in the drain's device figures after
``metrics.drain`` was taken, and the invariants fail every time.
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
from kvbench_core.engine.run import loop as loop_module
from kvbench_core.engine.run.runner import Runner
from kvbench_core.results.result import build_result
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run

PIECE = 64 << 10


class StuckWrite(CPUMemoryBackend):
    """A DRAM tier whose write moves one 64 KiB command, then blocks where no cancel can reach it until the
    run's cleanup begins; released, it reports a second command (the recorder raises ``Cancelled`` there)."""

    name = "stuckwrite"
    release: ClassVar[threading.Event] = threading.Event()
    went_on: ClassVar[list[str]] = []  # entries whose write issued a command after it was released

    def write(self, key: str, source: ByteSource) -> IOTiming:
        for step in range(2):
            start = time.perf_counter()
            if step:  # past the cancel the source would refuse a fill: the command alone is what counts
                type(self).went_on.append(key)
            else:
                source.fill(0, memoryview(bytearray(PIECE)))
            self.context.io_log.record(key, "write", step * PIECE, PIECE, start, time.perf_counter())
            assert type(self).release.wait(30), "the run never began its cleanup"
        raise AssertionError("the second command is past the cancel: the recorder raises there")

    def cleanup_begins(self) -> None:
        type(self).release.set()
        super().cleanup_begins()


class _Plugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"stuckwrite": StuckWrite}


@pytest.fixture
def stuck_tier(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    StuckWrite.release = threading.Event()
    StuckWrite.went_on = []
    monkeypatch.setattr(loop_module, "CANCEL_GRACE_S", 0.2)  # the give-up; the write outlasts it anyway
    with registered(_Plugin(), "test-abandoned-workers"):
        yield


def stuck_spec(tmp_path: Path) -> dict[str, Any]:
    spec = small_spec(cache={"tiers": [{"name": "stuck", "backend": "stuckwrite", "capacity": "64MiB"}]},
                      workload={"users": 1, "max_inflight": 1, "options": {"no_reads": True},
                                "mode": "prefill-only"},
                      duration=0.3, drain_timeout=0.1, output={"directory": str(tmp_path)})
    del spec["requests"]
    return spec


def test_an_abandoned_worker_books_nothing_after_the_give_up_and_its_bytes_are_reported(
        stuck_tier: None, tmp_path: Path) -> None:
    spec = stuck_spec(tmp_path)
    validate(spec)
    state = Runner(plan_run(resolve(spec, str(tmp_path)))).run()
    assert state.drain["workers_abandoned"] is True
    assert len(StuckWrite.went_on) == 1  # the worker did go on after the give-up: the case is real
    result = build_result(state, spec)
    drain, device = result["metrics"]["drain"], result["metrics"]["tiers"]["stuck"]["write"]["device"]
    # The first command completed before the give-up and no operation booked it: in no phase, reported
    # apart; the second came after the give-up and is counted nowhere.
    assert drain["abandoned_bytes"] == {"stuck": {"read": 0, "write": PIECE}}
    assert device["moved_bytes"] == PIECE
    assert sum(device[phase]["bytes"] for phase in ("warmup", "window", "drain")) == 0
    assert drain["write_bytes"] == 0
    failed = [item["name"] for item in result["checks"]["items"] if not item["passed"]]
    assert failed == [], result["checks"]["violations"]
    assert any("abandoned" in warning and f"{PIECE} bytes" in warning for warning in result["warnings"])


def test_a_drain_that_abandons_no_worker_reports_no_abandoned_bytes(tmp_path: Path) -> None:
    """The section stays as it was for every run that gave up on nobody."""
    spec = small_spec(duration=0.3, output={"directory": str(tmp_path)})
    del spec["requests"]
    validate(spec)
    state = Runner(plan_run(resolve(spec, str(tmp_path)))).run()
    assert state.drain["workers_abandoned"] is False
    assert "abandoned_bytes" not in state.drain
