"""``workers: {processes: N}``: one run split over N processes, one merged result its processes add up to.

Each process is a share of the one run (the run's seed, the users ``index`` modulo N, 1/N of each tier's
capacity, of ``requests`` and of ``max_inflight``), not a run of its own: docs/scale-out.md, worker processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from local_processes import spawned_children, start_measuring
from tiny_spec import assert_valid_result, tiny_spec

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.workload import Request
from kvbench_core.engine.run.setup import build_source
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.plan import RunPlan
from kvbench_core.scaleout.clients import tier_directories
from kvbench_core.scaleout.multiclient import local_client_plans

MiB = 1 << 20
#: RAG on, so the run preloads entries every user shares and the manifest has more than the users' own.
RAG = {"rag": {"enabled": True, "probability": 0.5, "documents": 2, "chunks_per_document": 2, "chunk_tokens": 16}}


def _workload(users: int, **more: Any) -> dict[str, Any]:
    options = {"profiles": {"tiny": {"context": [16, 64], "generate": [4, 16], "think_s": [0.01, 0.05]}},
               "profile_mix": {"tiny": 1}, "prefix_caching": {"prefix_tokens": [8, 32]},
               "multi_turn": {"turn_tokens": [8, 32]}, **RAG}
    return {"users": users, "max_inflight": 4, "options": options, **more}


def _plans(tmp_path: Path, processes: int, **overrides: Any) -> tuple[RunPlan, list[RunPlan]]:
    tmp_path.mkdir(exist_ok=True)
    _, plan = load_plan(tiny_spec(tmp_path, workers={"processes": processes}, **overrides))
    return plan, local_client_plans(plan)


def test_each_process_takes_its_share_of_the_one_run(tmp_path: Path) -> None:
    plan, plans = _plans(tmp_path, 2, workload=_workload(5), requests=21)
    assert [p.seed for p in plans] == [42, 42]  # the run's seed: its users draw what they draw in one process
    assert [p.users_for_client(i) for i, p in enumerate(plans)] == [3, 2]
    assert [p.window.request_limit for p in plans] == [11, 10]
    assert [p.workload.max_inflight for p in plans] == [2, 2]
    for whole, parts in zip(plan.tiers, zip(*(p.tiers for p in plans), strict=True), strict=True):
        assert sum(part.capacity for part in parts) == whole.capacity  # 8 MiB and 64 MiB, split exactly
    assert [tier_directories(p) for p in plans] == [[str(tmp_path / "cache" / f"process{i}")] for i in range(2)]
    assert all(p.processes == 1 for p in plans) and plan.processes == 2  # a process spawns nobody


def test_the_dry_run_says_the_plan_is_the_whole_runs_split_over_the_processes(tmp_path: Path) -> None:
    done = _cli("run", str(tiny_spec(tmp_path, workers={"processes": 2})), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert ("  workers: 2 processes, process i driving users i, i+2, ... with 1/2 of every tier below and of "
            "max_inflight (docs/scale-out.md); the figures below are the whole run's") in done.stdout.splitlines()


def _draws(source: Any, users: list[int], turns: int) -> list[Request]:
    return [request for _ in range(turns) for user in users if (request := source.next_request(user)) is not None]


def _request_record(request: Request, user: int) -> tuple[Any, ...]:
    """What the storage sees of a request (its user given as the run's number)."""
    write = (request.write.key, request.write.tokens) if request.write else None
    return (user, request.seq, request.qos, request.context_tokens, request.generate_tokens, write,
            tuple((r.key, r.tokens, r.kind, r.on_miss and r.on_miss.key) for r in request.reads), request.decode_keys)


def _manifest(records: list[tuple[Any, ...]], preload: list[str]) -> set[str]:
    """Every entry key the requests and the preload can store."""
    keys = set(preload)
    for record in records:
        keys |= {record[5][0]} if record[5] else set()
        keys |= {miss for *_, miss in record[6] if miss}
    return keys


def test_the_processes_issue_the_one_process_runs_requests_split_by_user(tmp_path: Path) -> None:
    """Determinism: with the same spec and seed, process i's users are users i, i+2, … of a one-process run
    and draw exactly their requests; the entries the processes store are the one-process run's."""
    users, turns = 5, 8
    whole, _ = _plans(tmp_path / "one", 1, workload=_workload(users))
    _, plans = _plans(tmp_path / "two", 2, workload=_workload(users))
    single = build_source(whole, users)
    expected = sorted(_request_record(r, r.user_id) for r in _draws(single, list(range(users)), turns))
    got: list[tuple[Any, ...]] = []
    preloads = []
    for index, plan in enumerate(plans):
        source = build_source(plan, plan.users_for_client(index))
        local = list(range(plan.users_for_client(index)))
        got += [_request_record(r, r.user_id * 2 + index) for r in _draws(source, local, turns)]
        preloads.append([write.key for write in source.preload()])
        assert {r.user_id for r in _draws(source, local, 1)} <= set(local)  # the pool's own numbers come back
    assert sorted(got) == expected and len(expected) == users * turns
    single_preload = [write.key for write in build_source(whole, users).preload()]
    assert preloads == [single_preload, single_preload] and single_preload  # shared entries: each its copy
    assert _manifest(got, single_preload) == _manifest(expected, single_preload)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"workers": {"processes": 0}}, "workers.processes: expected a value >= 1, got 0"),
    ({"workers": {"processes": 2}, "clients": 2}, "workers.processes: 2 cannot be combined with clients: 2"),
    ({"workers": {"processes": 4}}, "workers.processes: 4 is more than workload.users: 3"),
    ({"workers": {"processes": 3}, "workload": {"users": 3, "max_inflight": 2}},
     "workers.processes: 3 is more than workload.max_inflight: 2"),
    ({"workers": {"processes": 2}, "requests": 1}, "workers.processes: 2 is more than requests: 1"),
    ({"workers": {"processes": 2}, "precondition": {"size": "1MiB", "entry_size": "1MiB"}},
     "workers.processes: 2 cannot split precondition"),
    ({"workers": {"processes": 2}, "autoscaler": {"name": "qos"}}, "workers.processes: 2 cannot split the autoscaler"),
    ({"workers": {"processes": 2}, "output": {"io_log": "{tmp}/io.jsonl"}},
     "output.io_log: one I/O log cannot take 2 worker processes at once"),
    ({"workers": {"processes": 2}, "cache": {"tiers": [
        {"name": "nvme", "backend": "nvme", "capacity": "auto", "options": {"path": "{tmp}/cache"}}]}},
     "workers.processes: 2 cannot split cache.tiers[0].capacity: auto"),
])
def test_what_cannot_be_split_is_refused_in_one_line(tmp_path: Path, overrides: dict[str, Any], message: str) -> None:
    filled = json.loads(json.dumps(overrides).replace("{tmp}", str(tmp_path)))
    with pytest.raises(SpecError) as refused:
        load_plan(tiny_spec(tmp_path, **filled))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.parametrize(("options", "mode", "message"), [
    ({"arrival": {"process": "poisson", "rate": 5}}, "mixed",
     "workers.processes: 2 cannot split the arrivals of the open-loop source 'synthetic'"),
    ({}, "decode-only", "workers.processes: 2 cannot split workload.mode: decode-only"),
])
def test_what_the_source_cannot_split_is_refused_when_a_process_builds_it(tmp_path: Path, options: dict[str, Any],
                                                                          mode: str, message: str) -> None:
    """Whether a source is open-loop is known once it is built (the synthetic source's ``arrival`` option)."""
    workload = _workload(3, mode=mode)
    workload["options"] |= options
    _, plans = _plans(tmp_path, 2, workload=workload)
    with pytest.raises(SpecError) as refused:
        build_source(plans[0], plans[0].users_for_client(0))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvbench_core.cli", *args], capture_output=True, text=True,
                          timeout=240)


def _run(tmp_path: Path, spec: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    done = _cli("run", str(spec))
    files = list((tmp_path / "out").glob("*.json"))
    assert len(files) == 1, (files, done.stderr)
    return done, files[0]


@pytest.mark.slow
def test_a_two_process_run_is_one_result_its_processes_add_up_to(tmp_path: Path) -> None:
    spec = tiny_spec(tmp_path, workers={"processes": 2}, workload={"users": 4, "max_inflight": 2})
    done, path = _run(tmp_path, spec)
    assert done.returncode == 0, done.stderr
    result = json.loads(path.read_text())
    assert_valid_result(result)
    checked = _cli("check", str(path))  # every figure re-derived, the invariants and the status re-checked
    assert checked.returncode == 0, checked.stdout
    scale, processes, metrics = result["scale_out"], result["clients"], result["metrics"]
    assert (scale["mode"], scale["label"], scale["users_scope"]) == ("processes", "process", "split")
    assert scale["users_per_client"] == [2, 2] and scale["seeds"] == [42, 42]
    assert result["run"]["status"] == "completed" and [p["status"] for p in processes] == ["completed"] * 2
    assert result["checks"]["violations"] == [] and all(p["checks"]["violations"] == [] for p in processes)
    assert metrics["headline"]["requests_completed"] == sum(
        p["metrics"]["headline"]["requests_completed"] for p in processes) > 0
    assert metrics["latency_ms"]["end_to_end"]["count"] == sum(
        p["metrics"]["latency_ms"]["end_to_end"]["count"] for p in processes)
    for name, capacity in (("dram", 8 * MiB), ("nvme", 64 * MiB)):
        tier = metrics["tiers"][name]
        assert tier["capacity_bytes"] == capacity == sum(p["metrics"]["tiers"][name]["capacity_bytes"]
                                                         for p in processes)
        for op in ("read", "write"):
            own = [p["metrics"]["tiers"][name][op] for p in processes]
            assert tier[op]["bytes"] == sum(o["bytes"] for o in own)
            assert tier[op]["ops"] == sum(o["ops"] for o in own) == tier[op]["histograms"]["total"]["count"]
    assert metrics["tiers"]["nvme"]["write"]["bytes"] > 0
    assert [p["directories"] for p in processes] == [[str(tmp_path / "cache" / f"process{i}")] for i in range(2)]
    assert "2 processes (processes), users split: [2, 2] = 4" in done.stdout
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_a_process_that_dies_fails_the_run_naming_it(tmp_path: Path) -> None:
    spec = tiny_spec(tmp_path, duration="60s", workers={"processes": 2},
                     output={"directory": str(tmp_path / "out"), "interval": 0.5, "progress": "on"})
    process = start_measuring(spec, banner="2 processes [measuring")
    pids = spawned_children(process.pid)
    assert len(pids) == 2
    os.kill(pids[1], signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 6, stderr
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert_valid_result(result)
    killed = next(p for p in result["clients"] if p["pid"] == pids[1])
    assert killed["ended"] == "was killed by SIGKILL" and result["run"]["status"] == "failed"
    assert f"process {killed['index']} (pid {pids[1]}" in stderr and "was killed by SIGKILL" in stderr
    assert f"process {killed['index']} (pid {pids[1]}" in result["run"]["error"]
    assert not (tmp_path / "cache").exists()
