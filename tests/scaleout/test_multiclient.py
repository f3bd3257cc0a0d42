"""Local multi-client: per-client specs, exact percentile merging, a 2-client run, a client killed mid-run."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from local_processes import spawned_children, start_measuring
from tiny_spec import assert_valid_result, tiny_spec

from kvbench_core.cli.run_cmd import summarize
from kvbench_core.engine.measure.histogram import DEFAULT_ACCURACY, LatencyHistogram
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.merge import ClientReport, merge_results
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.plan import thaw
from kvbench_core.scaleout.clients import ClientLayout, DirectorySnapshot, client_plan, client_seed, tier_directories
from kvbench_core.scaleout.session import SessionOutcome, run_session

PYTHON = sys.executable


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], SessionOutcome]:
    """(as_written, resolved spec, outcome) of one real tiny session."""
    tmp = tmp_path_factory.mktemp("single")
    as_written, plan = load_plan(tiny_spec(tmp, duration="1s"))
    outcome = run_session(as_written, plan, quiet=True, exit_zero=True)  # a template: its request count is not
    assert outcome.exit_code == 0                                       # what the tests below judge
    return as_written, thaw(plan.spec), outcome


@pytest.fixture(scope="module")
def single(session: tuple[dict[str, Any], dict[str, Any], SessionOutcome]) -> tuple[dict[str, Any], dict[str, Any],
                                                                                      dict[str, Any]]:
    """(as_written, resolved spec, result JSON) of that run, the template for crafted client results."""
    as_written, spec, outcome = session
    return as_written, spec, outcome.results[0].to_json()


def test_each_client_gets_its_own_directory_seed_and_share_of_users(tmp_path: Path) -> None:
    _, plan = load_plan(tiny_spec(tmp_path, workload={"users": 5, "users_scope": "split"}))
    layout = ClientLayout("client", 3)
    plans = [client_plan(plan, layout, i) for i in range(3)]
    assert [tier_directories(p) for p in plans] == [[str(tmp_path / "cache" / f"client{i}")] for i in range(3)]
    assert plans[0].seed == 42 and len({p.seed for p in plans}) == 3
    assert client_seed(42, 2) == plans[2].seed  # reproducible
    assert [p.users_for_client(i) for i, p in enumerate(plans)] == [2, 2, 1]
    assert plan.tiers[1].backend.options["path"] == str(tmp_path / "cache")  # the original is untouched
    per_client = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, users_scope="per_client"))
    assert [per_client.users_for_client(i) for i in range(3)] == [5, 5, 5]


def test_dead_client_leftovers_are_removed_without_touching_what_was_there(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "someone-elses.dat").write_text("keep")
    created = tmp_path / "new" / "client1"
    snapshot = DirectorySnapshot([str(existing), str(created)])
    (existing / "RUN-c1-u0.kv").write_text("x")
    (existing / ".RUN-c1-probe").write_text("x")
    created.mkdir(parents=True)
    (created / "RUN-c1-u1.kv").write_text("x")
    snapshot.remove_leftovers(str(existing), "RUN-c1")
    snapshot.remove_leftovers(str(created), "RUN-c1")
    snapshot.remove_empty()
    assert sorted(p.name for p in existing.iterdir()) == ["someone-elses.dat"]
    assert not (tmp_path / "new").exists()


def _with_samples(result: dict[str, Any], samples: np.ndarray, wall_start: float, io: tuple[float, float],
                  nbytes: int) -> dict[str, Any]:
    """A copy of ``result`` whose latency histograms hold ``samples`` and whose nvme write I/O spans ``io``
    (wall clock) with ``nbytes``: a client result with known raw data."""
    crafted = copy.deepcopy(result)
    hist = LatencyHistogram()
    for value in samples:
        hist.add(float(value))
    metrics = crafted["metrics"]
    for name in ("end_to_end", "queue_wait", "storage"):
        metrics["histograms"][name] = hist.to_dict()
    metrics["histograms"]["end_to_end_by_qos"] = {q: hist.to_dict() for q in metrics["histograms"]["end_to_end_by_qos"]}
    write = metrics["tiers"]["nvme"]["write"]
    write["histograms"] = {layer: hist.to_dict() for layer in ("total", "host", "device")}
    monotonic_start = 1000.0  # this client's perf_counter at measurement start
    metrics["window"].update(started_at=wall_start, ended_at=io[1], monotonic_start=monotonic_start)
    write.update(bytes=nbytes, ops=len(samples), first_start=monotonic_start + io[0] - wall_start,
                 last_end=monotonic_start + io[1] - wall_start)
    # the device's window (booked by time): the same bytes and span, so the bandwidth is known too
    write["device"]["window"].update(bytes=nbytes, first_start=write["first_start"], last_end=write["last_end"])
    write["device"]["warmup"]["bytes"] = write["device"]["drain"]["bytes"] = 0
    write["device"]["moved_bytes"] = nbytes
    return crafted


def test_merged_percentiles_equal_the_pooled_samples_within_the_sketch_error(single: Any) -> None:
    as_written, spec, result = single
    rng = np.random.default_rng(7)
    # Three clients with very different latency distributions: averaging their p95s would be far off.
    samples = [rng.lognormal(-6, 0.5, 4000), rng.lognormal(-3, 1.0, 1500), rng.exponential(0.2, 700)]
    windows = [(100.0, 110.0), (101.0, 112.0), (100.5, 111.0)]
    clients = [ClientReport(index=i, run_id=f"r-c{i}", seed=client_seed(42, i), users=3, directories=[],
                            result=ResultDocument.unchecked(_with_samples(result, s, 100.0, w, 1_000_000 * (i + 1))),
                            released_at=100.0 + i / 1e3)
               for i, (s, w) in enumerate(zip(samples, windows, strict=True))]
    merged = merge_results(clients, mode="local", label="client", run_id="r", trial=1, as_written=as_written,
                           spec=dict(spec, clients=3), started_at=99.0)
    pooled = np.sort(np.concatenate(samples))
    for p in (50, 95, 99, 99.9):
        exact = float(np.percentile(pooled, p, method="inverted_cdf")) * 1000
        for got in (merged["metrics"]["latency_ms"]["end_to_end"][f"p{p:g}"],
                    merged["metrics"]["tiers"]["nvme"]["write"]["latency_ms"]["device"][f"p{p:g}"],
                    merged["metrics"]["qos"]["batch"]["latency_ms"][f"p{p:g}"]):
            assert abs(got - exact) <= DEFAULT_ACCURACY * exact + 1e-9, (p, got, exact)
    averaged_p95 = np.mean([np.percentile(s, 95) for s in samples]) * 1000
    assert abs(averaged_p95 - merged["metrics"]["latency_ms"]["end_to_end"]["p95"]) > 0.05 * averaged_p95
    write = merged["metrics"]["tiers"]["nvme"]["write"]
    assert write["ops"] == sum(len(s) for s in samples)
    assert write["bytes"] == 6_000_000
    assert write["active_window_s"] == pytest.approx(12.0)  # the union 100..112 on the wall clock
    assert write["bandwidth_bytes_per_s"] == pytest.approx(6_000_000 / 12.0)
    assert merged["metrics"]["headline"]["nvme_write_device_p95_ms"] == write["latency_ms"]["device"]["p95"]
    assert merged["scale_out"]["clock_skew_s"] == pytest.approx(0.002)
    assert_valid_result(merged)


def _run_cli(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "kvbench_core.cli", *args], capture_output=True, text=True, timeout=240,
                          **kwargs)


def _only_result(tmp_path: Path) -> dict[str, Any]:
    files = list((tmp_path / "out").glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


@pytest.mark.slow
def test_two_local_clients_give_one_merged_result(tmp_path: Path) -> None:
    spec = tiny_spec(tmp_path, workload={"users": 3, "users_scope": "split", "max_inflight": 2})
    done = _run_cli(["run", str(spec), "--clients", "2"])
    assert done.returncode == 0, done.stderr
    result = _only_result(tmp_path)
    assert_valid_result(result)
    scale = result["scale_out"]
    assert (scale["mode"], scale["clients"], scale["users_scope"]) == ("local", 2, "split")
    assert scale["users_per_client"] == [2, 1] and scale["users_total"] == 3
    assert 0 <= scale["clock_skew_s"] < 1.0
    clients = result["clients"]
    assert [c["status"] for c in clients] == ["completed", "completed"]
    assert [c["directories"] for c in clients] == [[str(tmp_path / "cache" / f"client{i}")] for i in range(2)]
    # each phase is the slowest client's; the merged window spans every client's measured phase
    phases = result["run"]["phases_s"]
    assert phases == {name: max(c["phases_s"][name] for c in clients) for name in phases}
    assert result["metrics"]["window"]["measured_s"] >= phases["measured"] - 1e-9
    metrics = result["metrics"]
    assert metrics["headline"]["requests_completed"] == sum(c["metrics"]["headline"]["requests_completed"]
                                                            for c in clients) > 0
    for op in ("read", "write"):
        merged = metrics["tiers"]["nvme"][op]
        assert merged["bytes"] == sum(c["metrics"]["tiers"]["nvme"][op]["bytes"] for c in clients)
        assert merged["histograms"]["total"]["count"] == merged["ops"]
    assert metrics["latency_ms"]["end_to_end"]["count"] == sum(
        c["metrics"]["latency_ms"]["end_to_end"]["count"] for c in clients)
    assert "2 clients (local), users split: [2, 1] = 3" in done.stdout
    assert not (tmp_path / "cache").exists()  # every client cleaned up, and the shared parent is gone


def _start_and_wait_for_measurement(tmp_path: Path, duration: str) -> subprocess.Popen[str]:
    """Start a 2-client run and return once its aggregate progress shows the measurement phase."""
    spec = tiny_spec(tmp_path, duration=duration, output={"directory": str(tmp_path / "out"), "interval": 0.5,
                                                          "progress": "on"})
    return start_measuring(spec, "--clients", "2", banner="2 clients [measuring")


@pytest.mark.slow
def test_a_killed_client_stops_the_run_with_a_clear_error_and_no_leftovers(tmp_path: Path) -> None:
    process = _start_and_wait_for_measurement(tmp_path, "60s")
    pids = spawned_children(process.pid)
    assert len(pids) == 2
    os.kill(pids[1], signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 6, stderr
    result = _only_result(tmp_path)
    assert_valid_result(result)
    killed = next(c for c in result["clients"] if c["pid"] == pids[1])
    survivor = next(c for c in result["clients"] if c["pid"] == pids[0])
    assert killed["ended"] == "was killed by SIGKILL" and killed["status"] == "failed"
    assert f"client {killed['index']} (pid {pids[1]}" in stderr and "was killed by SIGKILL" in stderr
    assert result["run"]["status"] == "failed"
    assert survivor["status"] == "interrupted" and f"client {killed['index']}" in survivor["stop_reason"]
    assert result["metrics"]["headline"]["requests_completed"] > 0  # the partial, merged result
    assert result["metrics"]["window"]["measured_s"] < 60
    assert not (tmp_path / "cache").exists()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


@pytest.mark.slow
def test_sigterm_stops_every_client_and_keeps_the_partial_result(tmp_path: Path) -> None:
    process = _start_and_wait_for_measurement(tmp_path, "60s")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    result = _only_result(tmp_path)
    assert result["run"]["status"] == "interrupted"
    assert {c["status"] for c in result["clients"]} == {"interrupted"}
    assert result["metrics"]["window"]["measured_s"] < 60
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("ends", "merged"), [
    (["completed", "completed"], "completed"), (["completed", "failed_requests"], "degraded"),
    (["failed_requests", "interrupted"], "interrupted"), (["error", "completed"], "failed"),
    (["too_few", "too_few"], "completed"), (["completed", "violated"], "failed")])
def test_the_merged_status_follows_the_status_rules(single: Any, ends: list[str], merged: str) -> None:
    """A client's error fails the run and its signal interrupts it; else the status rules decide over the
    merged counts (results/status.py): a client whose requests failed degrades the whole run (it once merged
    as completed), clients that each said inconclusive can merge into enough requests for a p95, and a
    client's violated invariant fails the merged run though the merged sums hold."""
    as_written, spec, result = single

    def client_result(end: str) -> dict[str, Any]:
        crafted = copy.deepcopy(result)
        run = crafted["run"]
        if end == "error":
            run.update(status="failed", status_rule="error", error="tier 'nvme': write of 'k' failed: EIO")
        elif end == "interrupted":
            run.update(status="interrupted", status_rule="interrupted")
        elif end == "failed_requests":
            crafted["metrics"]["requests"]["failed"] = 3
            run.update(status="degraded", status_rule="failed_requests")
        elif end == "too_few":
            run.update(status="inconclusive", status_rule="too_few_requests")
        elif end == "violated":
            crafted["checks"] = {"passed": False, "violations": ["series_requests: edited"], "items": []}
        return crafted

    clients = [ClientReport(index=i, run_id=f"r-c{i}", seed=client_seed(42, i), users=3, directories=[],
                            result=ResultDocument.unchecked(client_result(end)), released_at=100.0)
               for i, end in enumerate(ends)]
    run = merge_results(clients, mode="local", label="client", run_id="r", trial=1, as_written=as_written,
                        spec=dict(spec, clients=2), started_at=99.0)["run"]
    assert run["status"] == merged, run["status_reason"]
    if "violated" in ends:
        assert run["status_reason"] == "invariant violated: client 1: series_requests: edited"


def test_the_summary_and_the_merge_take_documents_read_back_from_disk(
        session: tuple[dict[str, Any], dict[str, Any], SessionOutcome]) -> None:
    """Issue #28: the session holds each result as the typed document its file reads back as; the CLI
    summary prints a document as it prints the file's JSON, and two clients' documents read from disk merge
    into a result the schema accepts, whose counts are both clients' and whose summary names them."""
    as_written, spec, outcome = session
    (path,) = outcome.paths
    document = ResultDocument.read(path)  # format and schema checked
    assert outcome.results == [document]
    text = summarize(document)
    assert text == summarize(json.loads(path.read_text()))
    assert text.startswith(f"{document.run.name} [{document.run.status}] ")
    assert f"\n  requests {document.headline['requests_completed']} in " in text
    clients = [ClientReport(index=i, run_id=f"r-c{i}", seed=client_seed(42, i), users=3, directories=[],
                            result=ResultDocument.read(path), released_at=100.0) for i in range(2)]
    merged = ResultDocument.from_json(merge_results(clients, mode="local", label="client", run_id="r", trial=1,
                                                    as_written=as_written, spec=dict(spec, clients=2),
                                                    started_at=99.0))
    assert merged.requests["completed"] == 2 * document.requests["completed"]
    assert [client["run_id"] for client in merged.clients or ()] == ["r-c0", "r-c1"]
    assert "  2 clients (local), users " in summarize(merged)


def test_the_merged_declaration_is_the_whole_runs_not_client_0s(single: Any) -> None:
    """Cache state: the least advanced client's; working set: summed bytes, the most oversubscribed client's
    multiple per tier (each client has its own tier); reuse rate from the summed counters (review R1 M4)."""
    as_written, spec, result = single

    def client(i: int, state: str, stored: int, multiple: float, hits: int) -> ClientReport:
        crafted = copy.deepcopy(result)
        tiers = crafted["declaration"]["tiers"]
        tiers["cache_state"]["value"] = state
        tiers["working_set_vs_tier"]["value"] = {"stored_bytes": stored, "multiple_of_capacity": {"nvme": multiple}}
        crafted["metrics"]["cache"]["counters"].update(turn_reads=4, turn_hits=hits, prefix_reads=0, prefix_hits=0)
        return ClientReport(index=i, run_id=f"r-c{i}", seed=client_seed(42, i), users=3, directories=[],
                            result=ResultDocument.unchecked(crafted), released_at=100.0)

    merged = merge_results([client(0, "steady", 100, 0.5, 4), client(1, "warm", 300, 1.5, 1)], mode="local",
                           label="client", run_id="r", trial=1, as_written=as_written, spec=dict(spec, clients=2),
                           started_at=99.0)
    tiers, workload = merged["declaration"]["tiers"], merged["declaration"]["workload"]
    assert tiers["cache_state"]["value"] == "warm"
    assert tiers["working_set_vs_tier"]["value"] == {"stored_bytes": 400, "multiple_of_capacity": {"nvme": 1.5}}
    assert workload["prefix_reuse_rate"]["value"] == 5 / 8
    assert workload["input_length_mean"]["value"] == merged["workload"]["stats"]["input_length"]["mean"]


@pytest.mark.slow
def test_three_clients_merge_their_series_on_one_wall_clock_grid(tmp_path: Path) -> None:
    """#28 §4: merged by position, timestamps went backwards and the intervals added up to more than the
    window, and kvbench's own check skipped the merged series.  On one grid: increasing, covering the merged
    window exactly, every client's counts in it, and window_series / tier_bytes checked like a single run's."""
    spec = tiny_spec(tmp_path, duration="2s", workload={"users": 3, "users_scope": "split", "max_inflight": 2})
    done = _run_cli(["run", str(spec), "--clients", "3", "--exit-zero"])
    assert done.returncode == 0, done.stderr
    result = _only_result(tmp_path)
    series, metrics, clients = result["timeseries"], result["metrics"], result["clients"]
    times = [p["t_s"] for p in series]
    assert times == sorted(times) and len(set(times)) == len(times)
    covered = sum(p["interval_s"] for p in series)
    assert covered == pytest.approx(metrics["window"]["measured_s"], abs=0.0005 * len(series))
    for name in ("requests", "generated_tokens"):
        assert sum(p[name] for p in series) == pytest.approx(sum(p[name] for c in clients for p in c["timeseries"]))
    checked = {item["name"]: item["passed"] for item in result["checks"]["items"]}
    assert checked["window_series"] and checked["tier_bytes.nvme.write"], result["checks"]["violations"]
    offsets = [c["window_offset_s"] for c in clients]
    assert min(offsets) == 0.0 and all(0 <= o < 5 for o in offsets)
