"""The published result schema is enforced on every result the suite writes (root conftest.py sets
KVBENCH_VALIDATE_RESULTS, so ``write_result`` refuses a non-conforming document in this process and in
every kvbench child: CLI runs, local clients, MPI ranks, and each spec in specs/ via
test_shipped_specs.py); here: the hook itself, and a merged run with trials, end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tiny_spec import history_spec, run_cli

from kvbench_core.results.result import RESULT_FORMAT, write_result
from kvbench_core.results.result_schema import VALIDATE_ENV, ResultSchemaViolation, result_schema, schema_violations


def test_the_suite_validates_every_result_it_writes() -> None:
    assert os.environ.get(VALIDATE_ENV) == "1"
    assert result_schema()["properties"]["kvbench_result"]["const"] == RESULT_FORMAT == 2


def test_a_result_the_schema_rejects_is_not_written(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    with pytest.raises(ResultSchemaViolation, match="'run' is a required property"):
        write_result({"kvbench_result": 1}, target)
    assert list(tmp_path.iterdir()) == []  # no result, no temp file


def test_a_merged_run_its_clients_and_its_trials_summary_conform(tmp_path: Path) -> None:
    tier = {"name": "disk", "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(tmp_path / "cache"), "fsync": False}}
    spec = history_spec([tier], clients=2, trials=2, output={"directory": str(tmp_path / "out"), "progress": "off"})
    code, _, err = run_cli(tmp_path, spec)
    assert code == 0, err
    written = sorted((tmp_path / "out").glob("*.json"))
    assert len(written) == 3  # two merged trials and the summary
    for path in written:
        result = json.loads(path.read_text())
        assert schema_violations(result) == [], path.name
        assert result["kvbench_result"] == RESULT_FORMAT and result["checks"]["passed"], result["checks"]
        for client in result.get("clients", []):  # each client's own invariants, computed before the merge
            assert client["checks"]["passed"], client["checks"]
    summary = json.loads(next(p for p in written if p.stem.endswith("-summary")).read_text())
    assert [run["sha256"] for run in summary["trials"]["runs"]] == [
        __import__("hashlib").sha256(p.read_bytes()).hexdigest() for p in written if "-trial" in p.stem]
