"""``kvbench run --dry-run``: the plan from the run's own request stream, printed without touching storage;
``-v`` prints it before a real run and the tiers' percentiles after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_spec

from kvbench_core.cli import main
from kvbench_core.cli.run_cmd import render_plan
from kvbench_core.contracts.units import format_bytes
from kvbench_core.engine.run.dryrun import dry_run_estimate
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.plan import thaw


def nvme_spec(tmp_path: Path) -> Path:
    spec = small_spec(output={"directory": str(tmp_path / "out")},
                      cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "2MiB"},
                                       {"name": "disk", "backend": "nvme", "capacity": "64MiB",
                                        "options": {"path": str(tmp_path / "tier"), "fsync": False}}]})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_dry_run_prints_the_plan_and_touches_no_storage(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("kvbench_nvme")
    path = nvme_spec(tmp_path)
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run plan: t (dry run: no tier opened, nothing written)\n")
    assert "  model tiny-1b " in out and "entry sizes per request profile" in out and "    chatbot " in out
    assert "    disk         nvme   64.00 MiB = " in out and "offered load: " in out
    assert not (tmp_path / "tier").exists() and not (tmp_path / "out").exists()  # nothing created


def test_the_plan_is_deterministic_and_its_capacities_are_in_mean_entries(tmp_path: Path) -> None:
    _, run_plan = load_plan(str(nvme_spec(tmp_path)))
    plan = dry_run_estimate(run_plan)
    assert plan == dry_run_estimate(run_plan)  # same spec + seed -> same stream -> same plan
    profile = plan["profiles"]["chatbot"]
    assert profile["requests"] == plan["workload"]["sampled_requests"] == 4 * 50
    per_token = plan["model"]["bytes_per_token"]
    # contexts of 16-64 tokens, grown by up to 9 later turns of 8-32 tokens (a turn stores its whole context)
    assert 16 * per_token <= profile["entry_bytes_mean"] <= (64 + 9 * 32) * per_token
    for tier in plan["tiers"]:
        assert tier["capacity_entries"] * profile["entry_bytes_mean"] == pytest.approx(tier["capacity_bytes"])
    # no think time, no generation pacing: nothing bounds the closed loop's offered load
    assert plan["offered"]["requests_per_s"] is None


def test_offered_load_is_users_over_think_plus_generation(tmp_path: Path) -> None:
    raw = small_spec(workload={"generation": 10.0, "options": {
        "profiles": {"chatbot": {"context": [16, 64], "generate": [100, 100], "think_s": [0.5, 0.5]}}}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    plan = dry_run_estimate(load_plan(str(path))[1])
    cycle = 0.5 + 100 * 0.010  # think + 100 tokens at 10 ms
    assert plan["offered"]["requests_per_s"] == pytest.approx(4 / cycle)
    moved = plan["profiles"]["chatbot"]["entry_bytes_mean"] + plan["profiles"]["chatbot"]["read_bytes_per_request_mean"]
    assert plan["offered"]["bytes_per_s"] == pytest.approx(4 / cycle * moved)


def test_verbose_prints_the_plan_first_and_every_layer_after(tmp_path: Path, capsys: Any) -> None:
    spec = small_spec(requests=5, output={"directory": str(tmp_path / "out")})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "-q", "-v", "--exit-zero"]) == 0  # 5 requests: inconclusive, not failed
    out = capsys.readouterr().out
    assert out.startswith("run plan: t (before the run: drawn without touching storage)\n")  # not "dry run": it runs
    assert "\nt [inconclusive] 5 requests completed, a p95 needs 20\n" in out
    assert "  dram       read  device ms: p50 " in out and "  dram       write total  ms: p50 " in out


def plan_of(tmp_path: Path, raw: dict[str, Any], *overrides: str) -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_plan(str(path), list(overrides))[1]


def test_clients_multiply_the_offered_load_and_each_gets_its_own_directories(tmp_path: Path, capsys: Any) -> None:
    """Issue: --dry-run --clients 2 printed the single-client plan (4 users, one client's load)."""
    pytest.importorskip("kvbench_nvme")
    raw = yaml.safe_load(nvme_spec(tmp_path).read_text())
    raw["workload"].update(generation=10.0, options={**raw["workload"]["options"], "profiles": {
        "chatbot": {"context": [16, 64], "generate": [100, 100], "think_s": [0.5, 0.5]}}})
    one = dry_run_estimate(plan_of(tmp_path, raw))
    path = tmp_path / "s.yaml"
    assert main(["run", str(path), "--clients", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "  workload synthetic: 4 users per client, " in out
    assert "  clients: 2 (local), each with 4 users = 8 in all (users_scope per_client); " in out
    tier = tmp_path / "tier"
    assert f"directories {tier}/client0, {tier}/client1\n" in out
    assert "    disk         nvme   64.00 MiB = " in out and "; 2 x 64.00 MiB = 128.00 MiB in all" in out
    assert f"offered load: {2 * one['offered']['requests_per_s']:,.1f} requests/s" in out and "(all 2 clients, " in out
    assert not tier.exists() and not (tmp_path / "out").exists()  # still nothing created


def test_split_users_are_shared_out_and_the_load_is_that_of_the_users_in_all(tmp_path: Path) -> None:
    from kvbench_core.scaleout.multiclient import local_client_plans

    raw = small_spec(workload={"users": 10, "users_scope": "split", "generation": 10.0, "options": {
        "profiles": {"chatbot": {"context": [16, 64], "generate": [100, 100], "think_s": [0.5, 0.5]}}}})
    plan = plan_of(tmp_path, raw, "clients=3")
    estimate = dry_run_estimate(plan, local_client_plans(plan))
    assert estimate["clients"]["users"] == [4, 3, 3] and estimate["clients"]["users_total"] == 10
    assert estimate["workload"]["users"] == 4  # the sample is client 0's stream
    assert estimate["offered"]["requests_per_s"] == pytest.approx(10 / (0.5 + 100 * 0.010))
    text = render_plan(thaw(plan.spec), estimate)
    assert "  clients: 3 (local), users split 4 + 3 + 3 = 10 in all (users_scope split); " in text
    assert "4 users in client 0, " in text


def test_open_loop_clients_each_replay_their_own_arrivals(tmp_path: Path) -> None:
    from kvbench_core.scaleout.multiclient import local_client_plans

    raw = small_spec(workload={"options": {"arrival": {"process": "poisson", "rate": 20.0}}})
    single = dry_run_estimate(plan_of(tmp_path, raw))["offered"]["requests_per_s"]
    plan = plan_of(tmp_path, raw, "clients=2")
    assert dry_run_estimate(plan, local_client_plans(plan))["offered"]["requests_per_s"] == pytest.approx(2 * single)
    assert single == pytest.approx(20.0, rel=0.3)  # the sample's own rate, near the spec's


TINY_TOP = {"tiers": [{"name": "dram", "backend": "cpu", "capacity": "1KiB"},
                      {"name": "big", "backend": "cpu", "capacity": "64MiB"}]}


def test_a_tier_no_entry_fits_is_warned_about_in_the_plan_and_the_run_but_not_refused(
        tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue: capacity 1KiB above a fine tier showed '0.0 entries', warnings: [] and 'dram read 0.000 GB'."""
    from kvbench_core.engine.run import dryrun

    draws: list[int] = []
    real = dryrun.build_source
    monkeypatch.setattr(dryrun, "build_source", lambda plan, users: draws.append(users) or real(plan, users))
    spec = small_spec(requests=5, output={"directory": str(tmp_path / "out")}, cache=TINY_TOP)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    estimate = dry_run_estimate(load_plan(str(path))[1])
    smallest = estimate["entry_bytes_min"]
    per_token = estimate["model"]["bytes_per_token"]
    assert smallest % per_token == 0 and smallest >= per_token > 1024  # whole tokens, each larger than the tier
    head = "cache.tiers[0] 'dram': capacity 1.00 KiB holds no entry of this run: the smallest KV entry of "
    assert estimate["warnings"] == [f"{head}the run's first 200 requests is {format_bytes(smallest)} (an entry "
                                    "above 95% of a tier skips it), so this tier reads and writes nothing; give it "
                                    "more capacity, or 0 to leave it out"]
    draws.clear()
    # a warning, not a refusal: the tier below takes the entries (5 requests: inconclusive, not failed)
    assert main(["run", str(path), "-q", "-v", "--exit-zero"]) == 0
    out = capsys.readouterr().out
    assert draws == [4]  # the plan printed first draws the stream; the run warns from what it wrote
    plan_text, summary = out.split("\nt [")
    assert f"  WARNING: {estimate['warnings'][0]}" in plan_text
    [result] = (tmp_path / "out").glob("*.json")
    [warning] = json.loads(result.read_text())["warnings"]
    assert warning.startswith(f"{head}this run's requests is ") and f"  WARNING: {warning}\n" in summary
    written = json.loads(result.read_text())["metrics"]["tiers"]
    assert written["dram"]["write"]["bytes"] == 0 < written["big"]["write"]["bytes"]  # what the warning foretold


def test_a_tier_that_fits_or_is_disabled_by_capacity_zero_is_not_warned_about(tmp_path: Path) -> None:
    fine = plan_of(tmp_path, small_spec())
    assert dry_run_estimate(fine)["warnings"] == []
    disabled = plan_of(tmp_path, small_spec(cache=TINY_TOP), "cache.tiers[0].capacity=0")
    assert dry_run_estimate(disabled)["warnings"] == []
