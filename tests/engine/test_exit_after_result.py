"""A run that has stopped ends: what it had in flight is cut short, and nothing of it outlives the run (#16).

Issue #16: "One Test 4 run did not exit for over 100 s after writing its result".  Reproduced side by side
with the code of the day (afd69a2, docs/RELIABILITY.md "Test 4's long tail"): when the capacity autoscaler
converged ("Peak capacity found") the run stopped issuing, then joined every worker with no limit while
each finished its whole request (llama3.1-70b entries of ~2 GiB on the directory tier), then deleted the
tier's files, and only then wrote the result: 131 s from the stop to the result, 107 s of it in
``thread.join()``.  These tests state the invariants that mechanism breaks, with no clock in any assertion:

* a stop (here the autoscaler's convergence, Test 4's own path) cancels the in-flight entries at a command
  boundary: the entries cut short are exactly the requests the drain reports cancelled.  Joining every
  worker until its request ended (the old mechanism) cuts none short, so the first test fails on it;
* once ``Runner.run`` (or ``kvbench run``) has returned, and so once the result can be written, no thread
  the run started is alive: nothing moves or deletes bytes behind the result, and nothing is left for the
  interpreter (non-daemon pool threads, joined at exit) or the kernel (a daemon thread inside an unlink or
  fsync) to wait for after it.  The one thread meant to outlive ``Runner.run`` is a file tier's entry
  deletion (issue 32 §4, ``filetiers/deleter.py``), which ``kvbench run`` joins before it returns.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_measurement_window import PIECE, SlowPieces, slow_spec
from testkit import registered

from kvbench_core.cli import main as kvbench_main
from kvbench_core.contracts.autoscaler import Autoscaler, Decision, TelemetrySample
from kvbench_core.contracts.backend import ByteSource, IOTiming
from kvbench_core.contracts.errors import Cancelled
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.engine.run import loop as loop_module
from kvbench_core.engine.run.runner import Runner
from kvbench_core.results.result import build_result
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run

ROLLBACK_S = 1.0  # a cancelled write's rollback, longer than the (patched) cancel grace


class ConvergesAtOnce(Autoscaler):
    """Says "Peak capacity found" at its first decision: Test 4's stop, without waiting for a real peak."""

    name = "converges-at-once"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False,
        "properties": {"interval_s": {"type": "number", "exclusiveMinimum": 0, "default": 0.3}}}

    def decide(self, sample: TelemetrySample) -> Decision:
        return Decision(sample.users, "peak_found", converged=True, reason="Peak capacity found")

    def summary(self) -> dict[str, Any]:
        return {"reason": "Peak capacity found"}


class _CountingSource:
    """Counts the pieces a write really filled (a cancelled piece raises before it is counted)."""

    __slots__ = ("inner", "size", "tally")

    def __init__(self, inner: ByteSource, tally: list[int]) -> None:
        self.inner, self.size, self.tally = inner, inner.size, tally

    def fill(self, offset: int, out: memoryview) -> None:
        self.inner.fill(offset, out)
        self.tally[0] += 1


class CountedPieces(SlowPieces):
    """``SlowPieces`` that notes, per entry, ``[pieces filled, pieces in the entry, 1 once the write returned]``."""

    name = "countedpieces"
    pieces: ClassVar[dict[str, list[int]]] = {}

    def write(self, key: str, source: ByteSource) -> IOTiming:
        tally = [0, -(-source.size // PIECE), 0]
        type(self).pieces[key] = tally
        timing = super().write(key, _CountingSource(source, tally))
        tally[2] = 1
        return timing


class SlowRollback(SlowPieces):
    """A write that, once cancelled, takes ``ROLLBACK_S`` to give its half-written entry back: the unlink of
    a ~2 GiB half-written file (main, 2026-12-01, Test 4 spec: workers sat in ``_forget`` through the 5 s
    cancel grace and were reported abandoned)."""

    name = "slowrollback"

    def write(self, key: str, source: ByteSource) -> IOTiming:
        try:
            return super().write(key, source)
        except Cancelled:
            time.sleep(ROLLBACK_S)
            raise


class _Plugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"countedpieces": CountedPieces, "slowrollback": SlowRollback}

    @hookimpl
    def kvbench_autoscalers(self) -> dict[str, type]:
        return {"converges-at-once": ConvergesAtOnce}


@pytest.fixture
def plugin() -> Iterator[None]:
    CountedPieces.pieces.clear()
    with registered(_Plugin(), "test-exit-after-result"):
        yield


def converging_spec(tmp_path: Path, backend: str, **extra: Any) -> dict[str, Any]:
    """Test 4's shape at test scale: the capacity-style stop (converged, stop_when_converged) long before
    ``duration``, in-flight entries of 16+ commands of 50 ms, a drain limit shorter than one entry."""
    spec = slow_spec(tmp_path, piece_s=0.05, duration=20, drain_timeout=0.1,
                     autoscaler={"name": "converges-at-once", "stop_when_converged": True}, **extra)
    spec["cache"]["tiers"][0]["backend"] = backend
    return spec


def run_in_process(spec: dict[str, Any], tmp_path: Path) -> tuple[Any, set[threading.Thread]]:
    """Run ``spec`` with a ``Runner``; returns its state and the threads it left alive."""
    validate(spec)
    before = set(threading.enumerate())
    state = Runner(plan_run(resolve(spec, str(tmp_path)))).run()
    left = {thread for thread in threading.enumerate() if thread not in before and thread.is_alive()}
    return state, left


def test_a_converged_autoscaler_cancels_the_entries_in_flight_instead_of_waiting_for_them(
        plugin: None, tmp_path: Path) -> None:
    state, left = run_in_process(converging_spec(tmp_path, "countedpieces"), tmp_path)
    result = build_result(state, converging_spec(tmp_path, "countedpieces"))
    drain = result["metrics"]["drain"]
    assert state.stop_reason == "autoscaler converged: Peak capacity found"
    cut_short = sorted(key for key, (_, _, written) in CountedPieces.pieces.items() if not written)
    # The old runner joined every worker until its request was done: no entry was ever cut short.
    assert cut_short, f"every in-flight entry was written to its end: {CountedPieces.pieces}"
    assert drain["cancelled_in_flight"] is True
    assert drain["requests_cancelled"] == len(cut_short)  # one write per request (prefill-only, no reads)
    assert drain["workers_abandoned"] is False and not left, f"alive after the run: {sorted(t.name for t in left)}"


def test_after_kvbench_run_returns_no_thread_of_the_run_is_alive(plugin: None, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Through the command line, a directory tier on top (the nvme plugin's helper pool: non-daemon threads
    the interpreter joins at exit) over the slow tier its entries are demoted to, stopped by the autoscaler
    with work in flight: when ``kvbench run`` returns, its result is written and nothing of the run runs."""
    spec = converging_spec(tmp_path, "countedpieces", output={"directory": str(tmp_path / "results")})
    spec["cache"]["tiers"].insert(0, {"name": "nvme", "backend": "nvme", "capacity": "2MiB",
                                      "options": {"path": str(tmp_path / "kvcache")}})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    before = set(threading.enumerate())
    code = kvbench_main(["run", "-q", "--exit-zero", str(path)])  # a 1-request run: inconclusive, not failed
    left = {thread for thread in threading.enumerate() if thread not in before and thread.is_alive()}
    out = capsys.readouterr().out
    assert code == 0, out
    assert not left, f"alive once kvbench run returned: {sorted(t.name for t in left)}"
    (result_file,) = (tmp_path / "results").glob("*.json")
    result = json.loads(result_file.read_text())
    assert result["run"]["stop_reason"] == "autoscaler converged: Peak capacity found"
    # The directory tier was written (by time: its request may have ended in the drain, or been cancelled).
    assert result["metrics"]["tiers"]["nvme"]["write"]["device"]["moved_bytes"] > 0
    assert result["metrics"]["drain"]["workers_abandoned"] is False
    assert not (tmp_path / "kvcache").exists()  # the run's files are gone once kvbench run returns


def test_a_worker_that_outlasts_the_cancel_grace_is_still_over_when_the_run_returns(
        plugin: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain gives cancelled work ``CANCEL_GRACE_S`` to reach its boundary and then reports the rest
    ``workers_abandoned``; the cleanup after it waits for each entry's lock, so an abandoned worker still
    ends before ``run`` returns.  If that changed, the result would be written with the run's bytes still
    moving, and the process would wait for the worker after its result."""
    monkeypatch.setattr(loop_module, "CANCEL_GRACE_S", ROLLBACK_S / 5)  # 5 s; the test need not wait it
    state, left = run_in_process(converging_spec(tmp_path, "slowrollback"), tmp_path)
    assert state.drain["cancelled_in_flight"] is True
    assert state.drain["workers_abandoned"] is True  # the case this test is about did happen
    assert not left, f"alive after the run: {sorted(t.name for t in left)}"
