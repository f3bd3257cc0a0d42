"""``kvbench check --rules mlperf-v3``: the seed's §6 submission checklist, rule by rule."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.cli import main
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.records import DeviceStats
from kvbench_core.engine.measure.telemetry import OpStats
from kvbench_core.reports.aggregate import summarize_trials
from kvbench_core.reports.rules import RULESETS, check
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.invariants import attention_lines, run_checks
from kvbench_core.results.metrics import Metrics, TierMetrics, headline
from kvbench_core.runspec.loader import spec_sha256

GIB = 1 << 30
Mutation = Callable[[dict[str, Any]], None]


def _ms_histogram(*millis: float) -> LatencyHistogram:
    histogram = LatencyHistogram()
    for value in millis:
        histogram.add(value / 1000)
    return histogram


def _repeated_ms(millis: float, count: int) -> LatencyHistogram:
    """``count`` samples of one latency (one bucket), without adding them one by one."""
    histogram = _ms_histogram(millis)
    histogram.buckets = {index: count for index in histogram.buckets}
    histogram.count, histogram.total = count, millis / 1000 * count
    return histogram


def _op(nbytes: int, *device_ms: float) -> OpStats:
    return OpStats(ops=len(device_ms), bytes=nbytes, commands=len(device_ms), total=_ms_histogram(*device_ms),
                   host=_ms_histogram(*[0.0] * len(device_ms)), device=_ms_histogram(*device_ms),
                   command=_ms_histogram(*device_ms), command_bytes=nbytes, physical_bytes=nbytes,
                   first_start=1.0, last_end=300.0)


def _window_device(nbytes: int, commands: int) -> dict[str, DeviceStats]:
    """A tier op's device phases when every command completed inside the window."""
    return {"warmup": DeviceStats(), "window": DeviceStats(nbytes, commands, first_start=1.0, last_end=300.0),
            "drain": DeviceStats()}


def _spec(cpu_capacity: int) -> dict[str, Any]:
    """The seed's Option 1 (cpu 0) or Option 2 (cpu 4 GiB) spec as a session would record it."""
    tiers = [{"name": "nvme", "backend": "nvme", "capacity": 100 * GIB}]
    if cpu_capacity:
        tiers.insert(0, {"name": "dram", "backend": "cpu", "capacity": cpu_capacity})
    as_written = {"version": 1, "name": "mlperf", "seed": 42, "model": {"name": "llama3.1-8b"},
                  "duration": 300, "trials": 5, "workload": {"users": 200, "generation": "none"},
                  "cache": {"tiers": tiers}}
    resolved = {"seed": 42, "duration": 300.0, "trials": 5, "clients": 1, "output": {},
                "workload": {"generation": "none", "users": 200, "mode": "mixed"},
                "cache": {"tiers": copy.deepcopy(tiers), "promotion": "none"}, "autoscaler": None}
    return {"as_written": as_written, "resolved": resolved, "sha256": spec_sha256(as_written)}


def _trial(number: int, cpu_capacity: int) -> dict[str, Any]:
    """One trial's result, every section consistent with the others (its invariants hold)."""
    per_token = 131072
    decode_tokens = 9_000_000 + number * 10_000
    read_bytes = decode_tokens * per_token
    write_bytes = 400 * GIB
    completed = 5000 + number
    tier = TierMetrics("nvme", 100 * GIB, False, {}, _op(read_bytes, 890.0 + number, 892.0),
                       _op(write_bytes, 156.0), reads_served=5000,
                       device={"read": _window_device(read_bytes, 2), "write": _window_device(write_bytes, 1)},
                       moved={"read": read_bytes, "write": write_bytes})
    e2e = _repeated_ms(3000.0 + number, completed)
    metrics = Metrics(
        measured_s=301.2, started_at=1.0, ended_at=302.2, monotonic_start=0.0,
        requests={"completed": completed, "failed": 0, "write_failed": 0, "unfinished": 0,
                  "context_tokens": decode_tokens, "generated_tokens": 160_000 + number,
                  "decode_tokens_read": decode_tokens},
        end_to_end=e2e, queue_wait=_repeated_ms(1.0, completed), storage=_repeated_ms(900.0 + number, completed),
        end_to_end_by_qos={"batch": e2e}, service_by_qos={"batch": _repeated_ms(900.0 + number, completed)},
        tiers={"nvme": tier},
        cache={"reads_served_by_tier": {"nvme": 5000}, "read_misses": 500, "demotions_bytes": {},
               "demotions_count": {}, "evictions_deleted": 0, "promotions": 0,
               "counters": {"stored_entry_bytes": write_bytes}, "occupancy_at_end": {}},
        drain={}, verify={"enabled": False, "bytes_verified": 0, "seconds": 0.0, "integrity_errors": 0,
                          "mismatches": []},
        process_cpu_s=60.0, peak_rss_bytes=GIB, bytes_per_token=per_token).to_json()
    spec = _spec(cpu_capacity)
    return {"kvbench_result": 2, "kvbench_version": "test", "plugins": {},
            "run": {"id": f"s-t{number}", "name": "mlperf", "status": "completed", "stop_reason": "duration reached",
                    "error": None, "trial": number, "client_index": 0, "started_at": 1.0, "finished_at": 303.0,
                    "traced": False},
            "spec": spec, "model": {"name": "llama3.1-8b", "bytes_per_token_all_ranks": per_token},
            "environment": {"cpu_model": "Xeon", "ram_bytes": 256 * GIB, "os": "Ubuntu 22.04",
                            "paths": {"nvme": {"path": "/mnt/nvme", "block_device": {"model": "DC600M"}}}},
            "declaration": {}, "warnings": [], "metrics": metrics,
            "workload": {"source": {}, "stats": {}, "preload": None, "precondition": None, "users_final": 200,
                         "workers": 8},
            "timeseries": [{"t_s": 301.2, "interval_s": 301.2, "users": 200, "requests": completed,
                            "generated_tokens": metrics["requests"]["generated_tokens"],
                            "read_bytes_per_s": read_bytes / 301.2, "write_bytes_per_s": write_bytes / 301.2,
                            "tiers": {"nvme": {"read_bytes": read_bytes, "write_bytes": write_bytes}}}],
            "autoscaling": {"trajectory": [], "summary": {}}, "sections": {}, "errors": [],
            "checks": {"passed": True, "violations": [], "items": []}}


def _submission(directory: Path, cpu_capacity: int = 0, *, trials: int = 5, trial: Mutation | None = None,
                only: int | None = None) -> dict[str, Any]:
    """A trials summary, with its trial files in ``directory``, that satisfies every mlperf-v3 rule (option 1
    when cpu is 0, option 2 at 4 GiB); ``trial`` edits every trial (or trial number ``only``) before the
    session writes its file."""
    results, paths = [], []
    for number in range(1, trials + 1):
        result = _trial(number, cpu_capacity)
        if trial is not None and only in (None, number):
            trial(result)
        path = directory / f"mlperf-s-trial{number}.json"
        path.write_text(json.dumps(result))
        results.append(result)
        paths.append(path)
    return summarize_trials([ResultDocument.of(r) for r in results], paths, session_id="s", requested=5).to_json()


def _failed(result: dict[str, Any], directory: Path) -> dict[str, str]:
    return {o.rule: o.reason for o in check(ResultDocument.unchecked(result), "mlperf-v3", directory) if not o.passed}


@pytest.mark.parametrize("cpu", [0, 4 * GIB, 4 * 10**9])
def test_a_conforming_submission_passes_every_rule(cpu: int, tmp_path: Path) -> None:
    assert _failed(_submission(tmp_path, cpu), tmp_path) == {}


def _set(path: str, value: Any) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return apply


def _tier_in_front(backend: str, capacity: int) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        doc["spec"]["resolved"]["cache"]["tiers"].insert(0, {"name": "front", "backend": backend,
                                                             "capacity": capacity})
    return apply


def _unmeasured_read_p95(doc: dict[str, Any]) -> None:
    read = doc["metrics"]["tiers"]["nvme"]["read"]
    for layer in ("total", "device"):  # the seed's read "device" p95 is the whole read's (#28 §5)
        read["histograms"][layer] = LatencyHistogram().to_dict()
        read["latency_ms"][layer] = LatencyHistogram().summary()
    doc["metrics"]["headline"] = headline(doc["metrics"], doc["model"]["bytes_per_token_all_ranks"])


def _headline_and_its_statistics(key: str, value: float) -> Mutation:
    """What a forger edits: the headline figure and the trials' median beside it."""
    def apply(doc: dict[str, Any]) -> None:
        doc["metrics"]["headline"][key] = value
        doc["trials"]["metrics"][key].update(median=value, min=value, max=value, values=[value] * 5)
    return apply


#: (where: every "trial" file, trial n only, or the "summary"; mutation; the rule that must fail; its reason)
CASES: list[tuple[str | int, Mutation, str, str]] = [
    ("trial", _set("spec.resolved.seed", 7), "seed 42", "seed is 7"),
    ("trial", _tier_in_front("gpu", GIB), "gpu tier off", "gpu tier front is enabled"),
    ("trial", _set("spec.resolved.workload.generation", "realistic"), "generation none", "'realistic'"),
    ("trial", _set("spec.resolved.duration", 60.0), "duration >= 300 s", "duration is 60.0 s"),
    (3, _set("metrics.window.measured_s", 120.0), "duration >= 300 s", "trial 3: 120 s"),
    ("summary", _set("metrics.headline.decode_bytes_read_gb", 1.0), "median reported", "decode_bytes_read_gb"),
    (1, _set("run.status", "interrupted"), "every trial completed", "trial 1: interrupted"),
    ("trial", _tier_in_front("cpu", 8 * GIB), "metrics for the cpu tier setting", "8.00 GiB"),
    ("trial", _unmeasured_read_p95, "metrics for the cpu tier setting", "not measured: nvme_read_device_p95_ms"),
    (2, _set("run.traced", True), "not traced", "not scorable"),
    ("trial", _set("environment.cpu_model", None), "system info documented", "CPU model"),
    # Fooling cases the summary's own numbers used to pass:
    ("summary", _headline_and_its_statistics("decode_bytes_read_gb", 9999.0), "median reported",
     "decode_bytes_read_gb is 9999.0, the trials' median is"),
    ("trial", _set("spec.resolved.workload.mode", "prefill-only"), "prefill and decode", "'prefill-only'"),
    ("trial", _set("spec.resolved.autoscaler", {"name": "capacity", "options": {}}), "no autoscaler", "'capacity'"),
    ("trial", _set("spec.resolved.cache.promotion", "on_read"), "no promotion", "'on_read'"),
    (4, _set("metrics.tiers.nvme.write.errors", 3), "no failed writes", "trial 4: 3 failed writes"),
    (5, _set("metrics.requests.write_failed", 2), "no failed writes", "2 requests whose KV found no room"),
    ("trial", _set("model.name", "llama3.2-1b"), "model", "llama3.1-8b or llama3.1-70b-instruct"),
    (2, _set("metrics.headline.decode_bytes_read_gb", 2000.0), "invariants", "trial 2: decode_bytes"),
    ("summary", _set("trials.runs.1.sha256", "0" * 64), "trial files verified", "trial 2"),
]


@pytest.mark.parametrize(("where", "mutate", "rule", "fragment"), CASES)
def test_each_rule_fails_with_its_reason(where: str | int, mutate: Mutation, rule: str, fragment: str,
                                         tmp_path: Path) -> None:
    if where == "summary":
        doc = _submission(tmp_path)
        mutate(doc)
    else:
        doc = _submission(tmp_path, trial=mutate, only=None if where == "trial" else int(where))
    failed = _failed(doc, tmp_path)
    assert rule in failed, failed
    assert fragment in failed[rule]


def test_two_completed_trials_are_too_few(tmp_path: Path) -> None:
    failed = _failed(_submission(tmp_path, trials=2), tmp_path)
    assert "2 completed trials" in failed["3-5 trials"]


def test_an_edited_trial_file_is_not_trusted(tmp_path: Path) -> None:
    """The summary records each trial file's sha256: a trial edited after the run is refused, not judged."""
    doc = _submission(tmp_path)
    trial = tmp_path / "mlperf-s-trial3.json"
    edited = json.loads(trial.read_text())
    edited["spec"]["resolved"]["seed"] = 42  # any edit, even one that changes nothing the rules judge
    trial.write_text(json.dumps(edited, indent=1))
    failed = _failed(doc, tmp_path)
    assert "trial 3 (mlperf-s-trial3.json): sha256 differs" in failed["trial files verified"]


def test_a_trial_whose_spec_was_edited_with_its_hash_left_is_refused(tmp_path: Path) -> None:
    doc = _submission(tmp_path, trial=_set("spec.as_written.workload.users", 8), only=1)
    assert "does not hash to its recorded spec sha256" in _failed(doc, tmp_path)["trial files verified"]


def test_a_missing_trial_file_fails(tmp_path: Path) -> None:
    doc = _submission(tmp_path)
    (tmp_path / "mlperf-s-trial5.json").unlink()
    assert "trial 5 (mlperf-s-trial5.json): file not found" in _failed(doc, tmp_path)["trial files verified"]


def test_a_single_trial_is_not_a_submission() -> None:
    doc = _trial(1, 0)
    failed = {o.rule: o.reason for o in check(ResultDocument.unchecked(doc), "mlperf-v3") if not o.passed}
    assert set(failed) == {"3-5 trials", "median reported"}
    assert "-summary.json" in failed["3-5 trials"]


def test_check_command_lists_every_rule_and_exits_1_on_a_failure(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir()
    bad_dir.mkdir()
    good, bad = good_dir / "summary.json", bad_dir / "summary.json"
    good.write_text(json.dumps(_submission(good_dir)))
    bad.write_text(json.dumps(_submission(bad_dir, trial=_set("spec.resolved.seed", 1))))
    assert main(["check", str(good), "--rules", "mlperf-v3"]) == 0
    rules = len(RULESETS["mlperf-v3"])  # was a literal 10 before the rules re-derived from the trial files
    assert f"{rules} passed, 0 failed" in capsys.readouterr().out
    assert main(["check", str(bad), "--rules", "mlperf-v3", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    assert [c["rule"] for c in report["checks"] if not c["passed"]] == ["seed 42"]


def test_check_without_rules_re_checks_the_invariants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose written bytes do not add up fails ``kvbench check`` (exit 1), naming the invariant."""
    doc = _trial(1, 0)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    doc["metrics"]["tiers"]["nvme"]["write"]["bytes"] += 4096
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["check", str(good)]) == 0
    assert re.search(r"all \d+ invariants re-checked and hold", capsys.readouterr().out)  # says how many
    assert main(["check", str(bad)]) == 1
    assert "written + deduplicated bytes = stored + demoted" in capsys.readouterr().out
    # A result with no measured window has no invariant to check: it says so instead of "re-checked and holds".
    del doc["metrics"]["window"]
    unmeasured = tmp_path / "unmeasured.json"
    unmeasured.write_text(json.dumps(doc))
    assert main(["check", str(unmeasured)]) == 0
    assert "no measured window: no invariant applies" in capsys.readouterr().out


def _tier_op(op: str, field: str, delta: int) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        doc["metrics"]["tiers"]["nvme"][op][field] += delta
    return apply


def _counter(name: str, value: int) -> Mutation:
    return _set(f"metrics.cache.counters.{name}", value)


#: One mutation per invariant (docs/results.md, checks): the invariant it breaks is named in the violation.
INVARIANT_CASES: list[tuple[Mutation, str]] = [
    (_tier_op("read", "command_bytes", 4096), "command_bytes.nvme.read"),
    (_set("timeseries.0.tiers.nvme.write_bytes", 1), "tier_bytes.nvme.write"),
    (_set("timeseries.0.generated_tokens", 7), "series_tokens"),
    (_set("metrics.cache.counters", {"stored_entry_bytes": 400 * GIB, "prefix_reads": 10, "prefix_hits": 3,
                                     "prefix_misses": 6}), "prefix_reads"),
    (_set("metrics.tiers.nvme.reads_served", 4999), "reads_served.nvme"),
    (_set("metrics.headline.decode_bytes_read_gb", 1.0), "decode_bytes:"),
    (_counter("stored_entry_bytes", 1), "written_bytes"),
    (_set("metrics.headline.avg_throughput_tokens_per_sec", 600.0), "throughput_tokens"),
    (_set("metrics.window.measured_s", 200.0), "window_duration"),
    (_set("metrics.window.measured_s", 320.0), "window_duration"),  # 300 s + more than 2 % late
    (_set("timeseries.0.interval_s", 150.0), "window_series"),
]


@pytest.mark.parametrize(("mutate", "invariant"), INVARIANT_CASES)
def test_each_invariant_is_violated_by_its_edit(mutate: Mutation, invariant: str) -> None:
    doc = _trial(1, 0)
    assert run_checks(doc) == {**run_checks(doc), "passed": True, "violations": []}
    mutate(doc)
    violations = run_checks(doc)["violations"]
    assert any(line.startswith(invariant) for line in violations), violations


def _merged(offsets: list[float], measured: float) -> dict[str, Any]:
    """A merged result of clients whose windows (each 301.2 s of a 300 s duration) opened ``offsets`` s after
    the first one's, its union window ``measured`` s long."""
    doc = _trial(1, 0)
    doc["metrics"]["window"]["measured_s"] = doc["timeseries"][0]["interval_s"] = measured
    headline = doc["metrics"]["headline"]
    headline["avg_throughput_tokens_per_sec"] = round(doc["metrics"]["requests"]["generated_tokens"] / measured, 3)
    doc["clients"] = [{"index": i, "status": "completed", "window_offset_s": offset,
                       "metrics": {"window": {"measured_s": 301.2}}} for i, offset in enumerate(offsets)]
    return doc


def test_a_merged_window_is_the_clients_windows_skewed_by_their_opening() -> None:
    """Three clients released together open their windows up to seconds apart on a loaded machine (their own
    start-up and warm-up); the merged window runs from the first open to the last close, so it is longer than
    the duration by the last client's offset, not a window closed late (make specs-smoke, redis-shared-prefix:
    clients 0.48 s apart, a 20.62 s union of 20 s windows failed window_duration)."""
    offsets = [0.0, 0.14, 9.0]  # more than the 2 % (6 s) a single 300 s window may close late
    skewed = _merged(offsets, 9.0 + 301.2)
    assert run_checks(skewed)["passed"], run_checks(skewed)["violations"]
    for wrong in (9.0 + 301.2 + 7.0, 299.0):  # past the last open + duration + 2 %; shorter than the duration
        violations = run_checks(_merged(offsets, wrong))["violations"]
        assert any(line.startswith("window_duration") for line in violations), violations


def test_a_violation_is_one_summary_line_and_the_declared_contradictions_follow() -> None:
    doc = _trial(1, 0)
    doc["metrics"]["headline"]["decode_bytes_read_gb"] = 1.0
    doc["metrics"]["window"]["measured_s"] = 100.0  # a second violation, counted on the same line
    doc["checks"] = run_checks(doc)
    doc["warnings"] = ["declaration network.fabric: declared 'RoCE', detected 'none (local)'"]
    lines = attention_lines(doc)
    assert len(lines) == 2
    assert lines[0].startswith("  INVARIANT VIOLATED: ") and "more in the result's checks)" in lines[0]
    assert lines[1] == "  WARNING: declaration network.fabric: declared 'RoCE', detected 'none (local)'"


def test_a_real_run_checks_every_invariant_and_they_hold(tmp_path: Path) -> None:
    from tiny_spec import history_spec, run_cli

    tier = {"name": "disk", "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(tmp_path / "cache"), "fsync": False}}
    # 40 requests: a p95 needs 20 completed for the run to be completed (results/status.py)
    code, out, err = run_cli(tmp_path, history_spec([tier], requests=40,
                                                    output={"directory": str(tmp_path / "out"), "progress": "off"}))
    assert code == 0, err
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    names = {item["name"].split(".")[0].rstrip(":") for item in result["checks"]["items"]}
    assert {"tier_bytes", "command_bytes", "series_tokens", "prefix_reads", "turn_reads", "reads_served",
            "decode_bytes", "decode_bytes_read", "written_bytes", "throughput_tokens", "window_series"} <= names
    assert result["checks"]["violations"] == [] and result["checks"]["passed"] is True
    assert "INVARIANT VIOLATED" not in out
    assert main(["check", str(next((tmp_path / "out").glob("*.json")))]) == 0
