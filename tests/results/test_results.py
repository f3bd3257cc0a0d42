"""The result document: it restates the experiment (a re-runnable spec), carries the MLPerf headline
names, computes bandwidth over the window in which I/O happened, counts every byte that reached a tier
(demotions included) and never carries a credential."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import HAS_NVME, small_spec

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.contracts.errors import InputFileError
from kvbench_core.engine.measure.records import PHASES
from kvbench_core.engine.measure.telemetry import OpStats, Telemetry
from kvbench_core.engine.run.runner import Runner
from kvbench_core.results.metrics import TierMetrics
from kvbench_core.results.result import build_result, read_result, write_result
from kvbench_core.results.result_schema import VALIDATE_ENV
from kvbench_core.runspec.loader import load_spec, resolve, spec_sha256, validate
from kvbench_core.runspec.plan import plan_run

SECRET = "hunter2-4f9c81d7e2"  # an environment credential's value
URL_PASSWORD = "pa55w0rd-in-a-url"
HEADLINE = ("decode_bytes_read_gb", "avg_throughput_tokens_per_sec", "storage_throughput_tokens_per_sec",
            "nvme_read_device_p95_ms", "nvme_write_device_p95_ms", "end_to_end_latency_p95_ms", "cache_hit_rate")


@pytest.fixture(scope="module")
def two_tier_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """One run shared by the tests below: a 16 MiB DRAM tier spilling into a disk (or DRAM) tier, one
    worker (so every new entry lands in DRAM first), a secret in the environment and in the spec text."""
    tmp = tmp_path_factory.mktemp("results")
    disk: dict[str, Any] = {"name": "disk", "backend": "cpu", "capacity": "256MiB"}
    if HAS_NVME:
        disk = {"name": "disk", "backend": "nvme", "capacity": "256MiB",
                "options": {"path": str(tmp / "tier"), "fsync": False}}
    raw = small_spec(requests=40, description=f"mirror https://bob:{URL_PASSWORD}@example.com/kv, key {SECRET}",
                     workload={"users": 6, "max_inflight": 1},
                     cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "16MiB"}, disk]},
                     output={"directory": str(tmp / "out")})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVBENCH_TEST_PASSWORD", SECRET)
        validate(raw)
        state = Runner(plan_run(resolve(raw, str(tmp)))).run()
        assert state.crash is None, state.stop_reason
        result = build_result(state, raw)
        assert result["run"]["status"] == "completed", result["run"]["status_reason"]
        path = write_result(result, tmp / "out" / "result.json")
    return raw, result, path


def test_a_result_survives_the_round_trip_and_its_spec_re_validates(two_tier_run: Any) -> None:
    raw, result, path = two_tier_run
    assert read_result(path) == json.loads(json.dumps(result))
    embedded = read_result(path)["spec"]
    validate(embedded["as_written"])
    resolved = resolve(embedded["as_written"], ".")
    del resolved["spec_dir"]
    assert json.loads(json.dumps(resolved)) == embedded["resolved"]
    # The hash is of the spec as stored (secrets masked), so a re-run of the result reproduces it.
    assert embedded["sha256"] == spec_sha256(embedded["as_written"]) != spec_sha256(raw)
    as_written, _ = load_spec(path)  # a result file is accepted wherever a spec is
    assert as_written == embedded["as_written"]


def test_the_mlperf_headline_metrics_are_offered_under_their_names(two_tier_run: Any) -> None:
    _, result, _ = two_tier_run
    metrics = result["metrics"]
    headline = metrics["headline"]
    assert set(HEADLINE) <= set(headline)
    assert headline["requests_completed"] == metrics["requests"]["completed"] == 40
    assert headline["avg_throughput_tokens_per_sec"] == pytest.approx(
        metrics["requests"]["generated_tokens"] / metrics["window"]["measured_s"], abs=1e-3)
    assert headline["decode_bytes_read_gb"] == pytest.approx(
        metrics["requests"]["decode_tokens_read"] * result["model"]["bytes_per_token"] / 1e9, abs=1e-6)
    served = metrics["cache"]["reads_served_by_tier"]
    reads = sum(served.values()) + metrics["cache"]["read_misses"]
    assert headline["cache_hit_rate"] == pytest.approx(served.get("dram", 0) / reads, abs=1e-6)
    if HAS_NVME:
        assert headline["persistent_tier"] == "disk"
        assert headline["nvme_write_device_p95_ms"] == metrics["tiers"]["disk"]["write"]["latency_ms"]["device"]["p95"]
        assert headline["nvme_write_device_p95_ms"] > 0


def test_demotion_writes_are_counted_in_the_lower_tiers_write_bytes(two_tier_run: Any) -> None:
    _, result, _ = two_tier_run
    metrics = result["metrics"]
    demoted = metrics["cache"]["demotions_bytes"]["dram->disk"]
    assert demoted > 0
    # One worker: every new entry went to DRAM, so everything the disk received came by demotion ...
    assert metrics["tiers"]["disk"]["write"]["bytes"] == demoted
    assert metrics["tiers"]["disk"]["write"]["ops"] == metrics["cache"]["demotions_count"]["dram->disk"]
    # ... and the demotions' reads are DRAM traffic too.
    assert metrics["tiers"]["dram"]["read"]["bytes"] >= demoted


def test_the_declaration_states_the_working_set_prefix_lengths_and_cache_state(two_tier_run: Any) -> None:
    _, result, _ = two_tier_run
    tiers, workload = result["declaration"]["tiers"], result["declaration"]["workload"]
    working_set = tiers["working_set_vs_tier"]["value"]
    assert working_set["stored_bytes"] == result["metrics"]["cache"]["counters"]["stored_entry_bytes"] > 0
    # every new entry was stored once: the disk received the demoted ones, DRAM all of them (one worker)
    assert working_set["stored_bytes"] == result["metrics"]["tiers"]["dram"]["write"]["bytes"]
    assert working_set["multiple_of_capacity"]["dram"] == pytest.approx(working_set["stored_bytes"] / (16 << 20),
                                                                        abs=1e-4)
    assert working_set["multiple_of_capacity"]["dram"] > 1  # it spilled: the working set exceeds DRAM
    prefixes = workload["prefix_length_distribution"]["value"]
    # over the requests issued in the window, like the other workload statistics (some were never executed)
    assert prefixes["count"] >= result["metrics"]["cache"]["counters"]["prefix_reads"] > 0
    assert 4 <= prefixes["p50"] <= 12  # SMALL_WORKLOAD's prefix_tokens range
    assert tiers["cache_state"]["value"] == "cold"  # no warm-up, no pre-population


def test_spec_declare_knows_exactly_the_fields_a_run_detects(two_tier_run: Any) -> None:
    """`kvbench spec declare` tells users what they need not declare; it must match what runs fill in."""
    from kvbench_core.cli.spec_cmd import DETECTED_AT_RUN, DETECTED_OR_NOT_APPLICABLE, DETECTED_WITH_GPU

    _, result, _ = two_tier_run
    sources = {f"{section}.{name}": field["source"] for section, fields in result["declaration"].items()
               for name, field in fields.items()}
    detected = {name for name, source in sources.items() if source == "detected"}
    assert detected >= DETECTED_AT_RUN  # a GPU machine also detects its PCIe link, a file tier its storage
    assert detected - DETECTED_AT_RUN <= DETECTED_WITH_GPU | DETECTED_OR_NOT_APPLICABLE
    assert all(sources[name] in ("detected", "not applicable") for name in DETECTED_OR_NOT_APPLICABLE)


def test_tier_bandwidth_is_bytes_over_that_tiers_active_window(two_tier_run: Any) -> None:
    _, result, _ = two_tier_run
    for tier in result["metrics"]["tiers"].values():
        for op in ("read", "write"):
            stats = tier[op]
            device = stats["device"]["window"]  # booked by time: the window's commands and their span
            window = device["last_end"] - device["first_start"]
            assert stats["active_window_s"] == pytest.approx(window, abs=1e-6)
            assert stats["bandwidth_bytes_per_s"] == pytest.approx(device["bytes"] / window)


def test_no_secret_reaches_the_result_file(two_tier_run: Any) -> None:
    _, result, path = two_tier_run
    text = path.read_text()
    assert SECRET not in text and URL_PASSWORD not in text
    assert result["spec"]["as_written"]["description"] == "mirror https://***@example.com/kv, key ***"
    assert result["spec"]["resolved"]["description"] == result["spec"]["as_written"]["description"]


# -- the honest window -----------------------------------------------------------------------------------------


def test_bandwidth_is_computed_over_the_active_io_window_not_the_nominal_duration() -> None:
    now = [0.0]
    telemetry = Telemetry(["batch"], clock=lambda: now[0])
    telemetry.record_op("disk", "write", IOTiming(1.0, 0.1, 0.9, 999), 1.0, 2.0)  # before measuring: ignored
    telemetry.start_measuring()
    telemetry.record_op("disk", "write", IOTiming(1.0, 0.1, 0.9, 100), 10.0, 11.0)
    telemetry.record_op("disk", "write", IOTiming(2.0, 0.2, 1.8, 300), 20.0, 22.0)
    telemetry.record_op("dram", "read", IOTiming(0.5, 0.5, 0.0, 50), 12.0, 30.5)  # e.g. the drain
    disk = TierMetrics("cpu", None, False, {}, write=telemetry.tiers["disk"]["write"],
                       device={op: {p: telemetry.device[p]["disk"][op] for p in PHASES} for op in ("read", "write")})
    stats = disk.op_json("write")
    assert (stats["ops"], stats["bytes"], stats["active_window_s"]) == (2, 400, 12.0)
    assert stats["bandwidth_bytes_per_s"] == 400 / 12.0
    assert stats["device"]["warmup"]["bytes"] == 999 and stats["device"]["window"]["bytes"] == 400
    assert disk.op_json("read")["bandwidth_bytes_per_s"] is None  # no reads, no rate


def test_per_client_op_stats_merge_into_one_window() -> None:
    a, b = OpStats(), OpStats()
    a.add(IOTiming(1.0, 0.5, 0.5, 100, commands=2), 5.0, 6.0)
    b.add(IOTiming(3.0, 1.0, 2.0, 300, commands=3), 1.0, 4.0)
    a.merge(OpStats.from_dict(json.loads(json.dumps(b.to_dict()))))
    merged = a.to_dict()
    assert (merged["ops"], merged["bytes"], merged["commands"]) == (2, 400, 5)
    assert (merged["first_start"], merged["last_end"]) == (1.0, 6.0)
    assert merged["latency_ms"]["total"]["max"] == 3000.0


# -- reading result files --------------------------------------------------------------------------------------


def test_reading_a_result_reports_bad_files_clearly(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="result file not found"):
        read_result(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"kvbench_result": 1,\n  "metrics": }\n')
    with pytest.raises(InputFileError, match=r"broken.json:2: not valid JSON"):
        read_result(broken)
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(InputFileError, match=r"not a kvbench result"):
        read_result(other)


@pytest.mark.parametrize("command", [["report"], ["report", "--html"], ["check"], ["compare", "SELF"]])
def test_a_hollow_result_is_one_line_for_report_check_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  command: list[str]) -> None:
    # {"kvbench_result": 2, "metrics": {}} once ended `kvbench report` in a KeyError traceback, and `kvbench
    # check` passed it ("every invariant re-checked and holds") and `compare` printed an empty table, exit 0.
    from kvbench_core.cli import main

    hollow = tmp_path / "hollow.json"
    hollow.write_text('{"kvbench_result": 2, "metrics": {}}')
    name, *rest = command
    argv = [name, str(hollow), *(str(hollow) if arg == "SELF" else arg for arg in rest)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"kvbench: error: {hollow}: not a complete kvbench result (no 'run'")
    assert err.endswith("); it was not written by kvbench run, or was cut short\n") and err.count("\n") == 1
    assert "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hollow.json"]  # no report file begun


def test_a_result_never_replaces_an_existing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VALIDATE_ENV)  # the documents here are bare: only the writing is under test
    foreign = tmp_path / "result.json"
    foreign.write_text("not kvbench's")
    with pytest.raises(InputFileError, match="already exists; kvbench does not overwrite a result"):
        write_result({"kvbench_result": 2}, foreign)
    assert foreign.read_text() == "not kvbench's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]  # no temp file left behind
    written = write_result({"kvbench_result": 2}, tmp_path / "new.json")
    assert json.loads(written.read_text()) == {"kvbench_result": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "result.json"]


def test_workload_percentiles_are_lengths_a_request_had_and_match_workload_stats() -> None:
    """Nearest rank (docs/metrics.md): p99 of 1..99 tokens and one of 3500 is the 99th length, 99 (numpy's
    default interpolation said 133.01, a length no request had), and the run's result and ``kvbench workload stats``
    compute the same figures from the same lengths (review #16 M3)."""
    import numpy as np
    from kvbench_workloads.stats import distribution

    from kvbench_core.results.result import _stats

    lengths = [*range(1, 100), 3500]
    run = _stats(lengths)
    assert (run["p50"], run["p90"], run["p99"]) == (50, 90, 99)
    assert all(run[p] in lengths for p in ("p50", "p90", "p99"))
    trace = distribution(np.asarray(lengths))
    assert {p: trace[p] for p in ("p50", "p90", "p99", "max")} == {p: run[p] for p in ("p50", "p90", "p99", "max")}


def test_a_merged_declaration_has_no_client_0_input_length_p99() -> None:
    """Sample percentiles do not merge: the merged workload statistics carry p99 null, and so does the
    declaration beside the mean over every client, not client 0's tail (review #16 M3)."""
    from kvbench_core.results.merge_declaration import merge_declarations

    def client(mean: float, p99: float) -> dict[str, Any]:
        return {"workload": {"input_length_mean": {"value": mean}, "input_length_p99": {"value": p99}}}

    merged_stats = {"stats": {"input_length": {"count": 4, "mean": 150.0, "p99": None}}}
    merged = merge_declarations([client(100.0, 120.0), client(200.0, 260.0)], workload=merged_stats, counters={})
    assert merged["workload"]["input_length_mean"]["value"] == 150.0
    assert merged["workload"]["input_length_p99"]["value"] is None
