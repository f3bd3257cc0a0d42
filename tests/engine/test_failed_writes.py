"""A KV write no tier has room for is a failure (#16): counted apart, out of every throughput, listed in
errors, the run degraded; a spec in which no tier holds one entry is refused before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import memory_executor, small_spec
from tiny_spec import run_cli

from kvbench_core.cli.run_cmd import summarize
from kvbench_core.contracts.workload import Request, Write


def test_a_request_whose_kv_found_no_room_is_not_completed(run_spec: Any) -> None:
    """tiny-1b is 24 KiB per token: a 64 KiB tier holds one token, never a 16-64 token entry."""
    state, result = run_spec(small_spec(cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64KiB"}]}))
    requests = result["metrics"]["requests"]
    assert state.status == result["run"]["status"] == "degraded"
    assert requests["write_failed"] > 0 and requests["completed"] == 0
    assert requests["generated_tokens"] == 0
    headline = result["metrics"]["headline"]
    assert headline["avg_throughput_tokens_per_sec"] is None  # no byte moved: no throughput at all
    assert headline["storage_throughput_tokens_per_sec"] is None
    assert any(e["op"] == "kv_write" and "no tier had room" in e["error"] for e in result["errors"])
    assert result["metrics"]["cache"]["counters"]["allocation_failed"] >= requests["write_failed"]
    summary = summarize(result)
    assert summary.startswith("t [degraded]")
    assert f"not completed: {requests['write_failed']} requests whose KV no tier had room for" in summary


def test_the_executor_reports_a_write_that_found_no_room() -> None:
    executor = memory_executor(capacity=4096, bytes_per_token=1024)
    outcome = executor.execute(Request(0, 1, "batch", context_tokens=100, generate_tokens=1, write=Write("k", 100)))
    assert outcome.write_failed
    assert not executor.execute(Request(0, 2, "batch", 2, 1, write=Write("small", 2))).write_failed


def test_a_spec_where_no_tier_holds_one_entry_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = small_spec(cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "1KiB"}]},
                      output={"directory": str(tmp_path / "out")})
    code, _out, err = run_cli(tmp_path, spec)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert "cache.tiers: no tier can hold one entry" in line and "24576 bytes" in line
    # Refused when the spec loads, as every spec error is: nothing opened, no result (review R4: the dry run
    # accepted it, then the run refused it after writing a failed result).
    assert not (tmp_path / "out").exists()
    code, _out, err = run_cli(tmp_path, spec, "--dry-run")
    assert code == 2 and "cache.tiers: no tier can hold one entry" in err
