"""The dry run warns when a spec's requests cannot finish inside its window at the tiers' nominal speeds
(engine/run/window_fit.py; issue #28 §2: short runs over slow tiers completed 0 requests and said completed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import small_spec

from kvbench_core.cli import main
from kvbench_core.engine.run.dryrun import dry_run_estimate
from kvbench_core.engine.run.window_fit import REQUESTS_FOR_P95, window_fit_warnings
from kvbench_core.results.status import MIN_REQUESTS_FOR_P95
from kvbench_core.runspec.loader import load_plan


def _spec(duration: float, context: list[int], tier: dict[str, Any]) -> dict[str, Any]:
    spec = small_spec(duration=duration, model={"name": "llama3.1-8b"},
                      cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64MiB"}, tier]})
    del spec["requests"]
    spec["workload"]["options"]["profiles"]["chatbot"]["context"] = context
    return spec


def _plan(tmp_path: Path, spec: dict[str, Any]) -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_plan(str(path), [])[1]


def test_the_threshold_is_the_status_rules_own() -> None:
    assert REQUESTS_FOR_P95 == MIN_REQUESTS_FOR_P95


def test_a_request_larger_than_the_window_can_move_is_warned_about(tmp_path: Path) -> None:
    """llama3.1-8b is 128 KiB per token: 100k-120k tokens are 12-15 GiB an entry, over 1.8 s at 7 GB/s."""
    tier = {"name": "nvme", "backend": "nvme", "capacity": "64GiB", "options": {"path": str(tmp_path / "kv")}}
    warnings = dry_run_estimate(_plan(tmp_path, _spec(1.0, [100_000, 120_000], tier)))["warnings"]
    largest, few = [w for w in warnings if w.startswith("window: ")]
    assert "at cache.tiers[1] 'nvme' (nvme)'s nominal 7 GB/s" in largest and "longer than the 1 s window" in largest
    assert "completes at most 0 requests of this mix, and a p95 needs 20" in few
    assert not (tmp_path / "kv").exists()  # a dry run touches no tier


def test_a_window_long_enough_for_the_mix_is_not_warned_about(tmp_path: Path) -> None:
    tier = {"name": "nvme", "backend": "nvme", "capacity": "64GiB", "options": {"path": str(tmp_path / "kv")}}
    warnings = dry_run_estimate(_plan(tmp_path, _spec(60.0, [16, 64], tier)))["warnings"]
    assert not [w for w in warnings if w.startswith("window: ")]


def test_the_mix_decides_how_many_requests_the_window_completes(tmp_path: Path) -> None:
    """40 requests of 1 GB each through one 1.25 GB/s tier need 32 s: a 10 s window completes 12."""
    tier = {"name": "s3", "backend": "s3", "capacity": "1TiB", "options": {"bucket": "kvb-window"}}
    plan = _plan(tmp_path, _spec(10.0, [16, 64], tier))
    requests = [(0.5e9, 0.5e9)] * 40  # 0.5 GB entries: above 95% of the 64 MiB DRAM, so s3 takes them
    (warning,) = window_fit_warnings(plan, requests, "these")
    assert "the 10 s window completes at most 12 requests" in warning


def test_a_backend_without_a_nominal_speed_gives_no_estimate(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _spec(1.0, [16, 64], {"name": "more", "backend": "cpu", "capacity": "1GiB"}))
    object.__setattr__(plan.tiers[1].backend, "name", "vendor-tier")
    assert window_fit_warnings(plan, [(1e12, 0.0)], "these") == []


def test_the_warning_is_printed_by_dry_run(tmp_path: Path, capsys: Any) -> None:
    tier = {"name": "nvme", "backend": "nvme", "capacity": "64GiB", "options": {"path": str(tmp_path / "kv")}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_spec(1.0, [100_000, 120_000], tier), sort_keys=False))
    assert main(["run", str(path), "--dry-run"]) == 0
    assert "\n  WARNING: window: the largest of the run's first " in capsys.readouterr().out
