"""``kvbench run RESULT.json`` re-runs the embedded spec only when it verifies (sha256, format version)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tiny_spec import tiny_spec

from kvbench_core.cli import main
from kvbench_core.runspec.loader import spec_sha256


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real result of a short tiny run."""
    root = tmp_path_factory.mktemp("rerun")
    # 400 ms: too few requests for a p95 (inconclusive, exit 7); what is re-run is the spec, not its status
    assert main(["run", str(tiny_spec(root, duration="400ms")), "--quiet", "--exit-zero"]) == 0
    return next((root / "out").glob("*.json"))


def _edited(original: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    result = json.loads(original.read_text())
    edit(result)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(result))
    return path


def _users(result: dict[str, Any]) -> None:
    result["spec"]["as_written"]["workload"]["users"] = 8


def _zeroed(result: dict[str, Any]) -> None:
    result["spec"]["sha256"] = "0" * 64


def _removed(result: dict[str, Any]) -> None:
    del result["spec"]["sha256"]


def _future(result: dict[str, Any]) -> None:
    result["kvbench_result"] = 999


@pytest.mark.parametrize(("edit", "named"), [
    (_users, "the embedded spec was edited after the run"),
    (_zeroed, "not the hash of any spec"),
    (_removed, "spec.sha256 is missing"),
    (_future, "kvbench_result is 999"),
])
def test_a_tampered_or_unknown_result_is_refused_naming_the_mismatch(
        original: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: Callable[[dict[str, Any]], None], named: str) -> None:
    path = _edited(original, tmp_path, edit)
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert named in err and "--accept-edited-spec" in err
    assert len(err.strip().splitlines()) == 1


def test_the_override_runs_the_edited_spec_and_the_new_result_records_the_edit(
        original: Path, tmp_path: Path) -> None:
    path = _edited(original, tmp_path, _users)
    output = tmp_path / "again"
    assert main(["run", str(path), "--quiet", "--accept-edited-spec", "--output", str(output), "--exit-zero"]) == 0
    rerun = json.loads(next(output.glob("*.json")).read_text())
    record = rerun["run"]["rerun_of"]
    assert record["edited"] is True and "edited after the run" in record["mismatch"]
    assert record["recorded_sha256"] == json.loads(original.read_text())["spec"]["sha256"]
    assert record["spec_sha256"] != record["recorded_sha256"]
    assert rerun["spec"]["resolved"]["workload"]["users"] == 8
    assert "rerun_of" not in rerun["spec"]["resolved"]


def test_a_verified_result_re_runs_and_says_where_it_came_from(original: Path, tmp_path: Path) -> None:
    output = tmp_path / "again"
    assert main(["run", str(original), "--quiet", "--output", str(output), "--exit-zero"]) == 0
    rerun = json.loads(next(output.glob("*.json")).read_text())
    assert rerun["run"]["rerun_of"]["edited"] is False
    assert rerun["run"]["rerun_of"]["file"] == str(original)
    first = json.loads(original.read_text())
    # --output is an override, so the spec that ran differs from the recorded one by exactly that field
    assert rerun["spec"]["as_written"]["output"]["directory"] == str(output)
    assert rerun["spec"]["sha256"] == spec_sha256(rerun["spec"]["as_written"]) != first["spec"]["sha256"]
