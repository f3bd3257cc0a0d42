"""A run's status and exit code (results/status.py, docs/results.md "Status and exit code"): each rule, in
order, on plain counts; then real runs through ``kvbench run`` that end inconclusive, degraded or failed,
with the exit code each status documents, and the opt-out that gives 0."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import small_spec
from testkit import registered

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.cli import main
from kvbench_core.contracts.backend import ByteSource, IOTiming
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.results.status import (
    MIN_REQUESTS_FOR_P95,
    Verdict,
    decide,
    decide_result,
    recorded_stop,
    trials_verdict,
    verdict_of,
    worst,
)


# -- the rules, on counts ------------------------------------------------------------------------------------
def test_enough_requests_none_failed_and_every_invariant_holding_is_completed() -> None:
    verdict = decide(stopped_as=None, stop_reason="duration reached", completed=MIN_REQUESTS_FOR_P95)
    assert verdict == Verdict("completed", "completed", "duration reached; 20 requests completed")
    assert verdict.error() is None


@pytest.mark.parametrize("completed", [0, 1, MIN_REQUESTS_FOR_P95 - 1])
def test_fewer_requests_than_a_p95_needs_is_inconclusive(completed: int) -> None:
    verdict = decide(stopped_as=None, stop_reason="duration reached", completed=completed)
    assert (verdict.status, verdict.rule) == ("inconclusive", "too_few_requests")
    assert verdict.reason.endswith("completed, a p95 needs 20")
    assert verdict.error() is not None and verdict.error().exit_code == 7


def test_the_first_rule_that_applies_decides() -> None:
    base = {"stop_reason": "duration reached", "completed": 5, "failed": 111, "no_room": 0}
    # an error beats everything; corrupted bytes beat a signal; a signal beats a broken invariant; a broken
    # invariant beats failed requests; failed requests beat too few requests
    assert decide(stopped_as="failed", **base, integrity_errors=3).rule == "error"
    assert decide(stopped_as="interrupted", **base, integrity_errors=3).rule == "integrity"
    assert decide(stopped_as="interrupted", **base, violations=["x"]).rule == "interrupted"
    assert decide(stopped_as=None, **base, violations=["x: y"]).rule == "invariant"
    degraded = decide(stopped_as=None, **base)
    assert (degraded.status, degraded.rule) == ("degraded", "failed_requests")
    assert degraded.reason == "111 of 116 requests did not complete: 111 failed on storage errors"
    assert degraded.error().exit_code == 6


def test_a_single_failed_request_degrades_a_long_run() -> None:
    """The threshold is none: a failed request is missing from every percentile of the run."""
    verdict = decide(stopped_as=None, stop_reason="", completed=10_000, no_room=1)
    assert verdict.status == "degraded" and "1 found no tier with room" in verdict.reason


def test_integrity_and_invariant_failures_have_their_own_codes() -> None:
    integrity = decide(stopped_as=None, stop_reason="", completed=100, integrity_errors=26)
    assert (integrity.status, integrity.error().exit_code) == ("failed", 5)
    assert integrity.reason == "26 verified reads returned bytes different from what was written"
    invariant = decide(stopped_as=None, stop_reason="", completed=100, violations=["a: b", "c: d"])
    assert (invariant.status, invariant.error().exit_code) == ("failed", 8)
    assert invariant.reason == "invariant violated: a: b (+1 more)"


def test_a_result_file_is_re_decided_from_its_own_sections() -> None:
    result = {"run": {"status": "completed", "stop_reason": "duration reached"},
              "metrics": {"requests": {"completed": 116, "failed": 0, "write_failed": 0},
                          "verify": {"integrity_errors": 2}},
              "checks": {"violations": []}}
    assert recorded_stop(result["run"]) is None
    assert decide_result(result, recorded_stop(result["run"])).rule == "integrity"
    assert recorded_stop({"status": "failed", "status_rule": "integrity"}) is None  # re-derived, not trusted
    assert recorded_stop({"status": "failed", "error": "x"}) == "failed"  # a file from before the rules


def test_a_session_takes_its_worst_status_and_a_status_kvbench_does_not_define_is_a_failure() -> None:
    runs = [{"status": "completed", "status_rule": "completed", "status_reason": "ok"},
            {"status": "inconclusive", "status_rule": "too_few_requests", "status_reason": "3 requests completed"},
            {"status": "degraded", "status_rule": "failed_requests", "status_reason": "1 of 30 requests"}]
    assert worst(verdict_of(run) for run in runs).status == "degraded"
    assert trials_verdict(runs, 3) == Verdict("degraded", "failed_requests", "trial 3: 1 of 30 requests")
    assert trials_verdict(runs[:1], 3).status == "interrupted"  # two trials never ran
    assert trials_verdict(runs[:1], 1).status == "completed"
    assert verdict_of({"status": "splendid"}).status == "failed"


# -- real runs ---------------------------------------------------------------------------------------------
class FlakyMemory(CPUMemoryBackend):
    """A DRAM tier whose every write but each fifth fails, as a failing device's would."""

    name = "flaky-memory"
    writes: ClassVar[int] = 0
    lock = threading.Lock()

    def write(self, key: str, source: ByteSource) -> IOTiming:
        with self.lock:
            type(self).writes += 1
            fails = type(self).writes % 5 != 0
        if fails:
            raise OSError(5, "Input/output error")
        return super().write(key, source)


class _FlakyPlugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {FlakyMemory.name: FlakyMemory}


def _run(tmp_path: Path, spec: dict[str, Any], *flags: str) -> tuple[int, str, dict[str, Any]]:
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))
    code = main(["run", str(path), "--quiet", "--output", str(tmp_path / "out"), *flags])
    (result,) = sorted((tmp_path / "out").glob("*.json"))
    return code, result.read_text(), json.loads(result.read_text())


def test_a_run_that_completes_too_few_requests_is_inconclusive_and_exits_7(tmp_path: Path, capsys: Any) -> None:
    code, _, result = _run(tmp_path, small_spec(requests=5))
    assert code == 7
    assert (result["run"]["status"], result["run"]["status_rule"]) == ("inconclusive", "too_few_requests")
    out, err = capsys.readouterr()
    assert out.startswith("t [inconclusive] 5 requests completed, a p95 needs 20\n")  # the rule, first
    assert err.strip() == "kvbench: error: 5 requests completed, a p95 needs 20"


def test_most_requests_failing_under_on_error_count_is_degraded_and_exits_6(tmp_path: Path, capsys: Any) -> None:
    FlakyMemory.writes = 0
    spec = small_spec(on_error="count", cache={"tiers": [{"name": "flaky", "backend": FlakyMemory.name,
                                                           "capacity": "64MiB"}]})
    with registered(_FlakyPlugin(), "test-flaky-memory"):
        code, _, result = _run(tmp_path, spec)
    requests = result["metrics"]["requests"]
    assert requests["failed"] > requests["completed"]
    assert code == 6
    assert (result["run"]["status"], result["run"]["status_rule"]) == ("degraded", "failed_requests")
    err = capsys.readouterr().err
    assert "requests failed on storage errors (on_error: count); first: tier 'flaky'" in err


def test_a_request_no_tier_had_room_for_degrades_the_run(tmp_path: Path) -> None:
    code, _, result = _run(tmp_path, small_spec(cache={"tiers": [{"name": "dram", "backend": "cpu",
                                                                   "capacity": "64KiB"}]}))
    assert code == 6 and result["run"]["status"] == "degraded"
    assert "found no tier with room" in result["run"]["status_reason"]


@pytest.mark.parametrize("how", ["flag", "spec"])
def test_the_opt_out_gives_0_for_degraded_and_inconclusive_and_says_why(tmp_path: Path, capsys: Any,
                                                                        how: str) -> None:
    spec = small_spec(requests=5)
    if how == "spec":
        spec["output"]["exit_zero"] = True
    code, _, result = _run(tmp_path, spec, *(["--exit-zero"] if how == "flag" else []))
    assert code == 0 and result["run"]["status"] == "inconclusive"  # the result still says what happened
    err = capsys.readouterr().err
    assert err.strip() == ("kvbench: warning: 5 requests completed, a p95 needs 20 "
                           "(exit 0: --exit-zero / output.exit_zero)")


def test_the_opt_out_does_not_hide_a_failed_run(tmp_path: Path) -> None:
    spec = small_spec(output={"exit_zero": True},
                      cache={"tiers": [{"name": "bad", "backend": FlakyMemory.name, "capacity": "64MiB"}]})
    FlakyMemory.writes = 0
    with registered(_FlakyPlugin(), "test-flaky-memory"):
        code, _, result = _run(tmp_path, spec, "--exit-zero")
    assert code == 4 and result["run"]["status"] == "failed"  # on_error: stop, the first failed write


def test_a_completed_run_exits_0_and_says_so(tmp_path: Path, capsys: Any) -> None:
    code, _, result = _run(tmp_path, small_spec(requests=MIN_REQUESTS_FOR_P95))
    assert code == 0 and result["run"]["status"] == "completed" and result["checks"]["passed"]
    assert capsys.readouterr().out.startswith("t [completed] request count reached; 20 requests completed\n")


def test_a_violated_invariant_fails_the_run_and_exits_8(tmp_path: Path, capsys: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, ``INVARIANT VIOLATED`` was printed and the run exited 0.  The violation is injected into the
    run's own checks (a real run's checks hold): what is tested is what the status and the exit code do."""
    from kvbench_core.results import result as builder

    real = builder.run_checks

    def one_violated(document: dict[str, Any]) -> dict[str, Any]:
        checks = real(document)
        return {**checks, "passed": False, "violations": ["series_requests: injected (expected 20, found 19)"]}

    monkeypatch.setattr(builder, "run_checks", one_violated)
    code, _, result = _run(tmp_path, small_spec(requests=MIN_REQUESTS_FOR_P95), "--exit-zero")
    assert code == 8  # the opt-out does not cover a failed run
    assert (result["run"]["status"], result["run"]["status_rule"]) == ("failed", "invariant")
    out, err = capsys.readouterr()
    assert out.startswith("t [failed] invariant violated: series_requests: injected (expected 20, found 19)\n")
    assert err.strip() == "kvbench: error: invariant violated: series_requests: injected (expected 20, found 19)"


def test_kvbench_check_re_derives_the_status_the_run_wrote(tmp_path: Path, capsys: Any) -> None:
    """The run writes its status with the rules kvbench check re-derives it with: an inconclusive run's file
    checks out (its status is true), and the same file with its status edited to completed does not."""
    _run(tmp_path, small_spec(requests=5))
    (path,) = sorted((tmp_path / "out").glob("*.json"))
    capsys.readouterr()
    assert main(["check", str(path), "--json"]) == 0
    rules = {c["rule"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert rules["status re-derived"]["passed"]
    edited = json.loads(path.read_text())
    edited["run"].update(status="completed", status_rule="completed")
    lie = tmp_path / "edited.json"
    lie.write_text(json.dumps(edited))
    assert main(["check", str(lie), "--json"]) != 0


def test_a_trials_session_exits_with_its_worst_trials_status(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(small_spec(requests=5, trials=2, trial_pause=0)))
    code = main(["run", str(path), "--quiet", "--output", str(tmp_path / "out")])
    assert code == 7
    (summary,) = (tmp_path / "out").glob("*-summary.json")
    run = json.loads(summary.read_text())["run"]
    assert (run["status"], run["status_reason"]) == ("inconclusive", "trial 1: 5 requests completed, a p95 needs 20")
    assert "trials summary [inconclusive] trial 1: 5 requests completed, a p95 needs 20; 0 of 2 trials counted" \
        in capsys.readouterr().out
