"""``kvbench run --dry-run``: the plan from the run's own request stream, printed without touching storage;
``-v`` prints it before a real run and the tiers' percentiles after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_spec

from kvbench_core.cli import main
from kvbench_core.engine.dryrun import dry_run_estimate
from kvbench_core.spec.loader import load_plan


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
    assert main(["run", str(path), "-q", "-v"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run plan: t (before the run: drawn without touching storage)\n")  # not "dry run": it runs
    assert "\nt [completed] request count reached\n" in out
    assert "  dram       read  device ms: p50 " in out and "  dram       write total  ms: p50 " in out
