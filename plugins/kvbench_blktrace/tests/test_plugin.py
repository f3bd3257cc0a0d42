"""The spec's ``tracing`` switch end to end through kvbench itself (no root needed: the untraced paths)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench_core.cli import main
from kvbench_core.contracts.errors import SpecError
from kvbench_core.runspec.loader import validate

MEMORY_ONLY = {
    "version": 1, "name": "traced", "seed": 1, "model": {"name": "llama3.2-1b"}, "duration": "1s",
    # Small contexts: the default profiles' 25K-token entries (800 MB) fit no 64 MiB tier, and a run whose
    # KV writes all fail is degraded, not completed.
    "workload": {"users": 1, "max_inflight": 1, "options": {"profiles": {"chatbot": {"context": [16, 64]}},
                                                          "profile_mix": {"chatbot": 1}}},
    "cache": {"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64MiB"}]},
}


@pytest.mark.parametrize("tracing", ["block", "none", {"mode": "block"},
                                     {"mode": "block", "required": True, "attach_timeout": "90s"}])
def test_schema_accepts(tracing: Any) -> None:
    validate({**MEMORY_ONLY, "tracing": tracing})


@pytest.mark.parametrize(("tracing", "where"), [("blocks", "tracing"), ({"mode": "block", "bogus": 1}, "tracing"),
                                                ({"required": True}, "tracing")])
def test_schema_rejects_with_the_field(tracing: Any, where: str) -> None:
    with pytest.raises(SpecError, match=where):
        validate({**MEMORY_ONLY, "tracing": tracing})


def run_spec(tmp_path: Path, tracing: Any) -> tuple[int, dict[str, Any]]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**MEMORY_ONLY, "tracing": tracing, "output": {"directory": str(tmp_path)}}))
    code = main(["run", str(spec), "--quiet", "--exit-zero"])  # 1 s of one user: too few requests for a p95
    (result,) = tmp_path.glob("traced-*.json")
    return code, json.loads(result.read_text())


def test_untraceable_run_goes_on_untraced_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = run_spec(tmp_path, "block")
    assert code == 0 and result["run"]["status"] in ("completed", "inconclusive")  # ran, nothing failed
    assert result["run"]["traced"] is False
    assert "block_trace" not in result["sections"]
    assert "no tier stores files" in result["sections"]["block_trace_status"]["reason"]
    assert "warning: running untraced: no tier stores files" in capsys.readouterr().err


def test_required_tracing_fails_the_run_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = run_spec(tmp_path, {"mode": "block", "required": True})
    assert code == 3 and result["run"]["status"] == "failed"
    assert "block tracing is required but not possible" in result["run"]["error"]
    assert result["run"]["traced"] is False
    assert "required but not possible" in capsys.readouterr().err
