"""Where a relative path in a spec points (README, "A run spec"): what the spec *reads* (a model's
config.json, a workload trace) is taken from the spec file's folder, so a spec and its inputs travel
together; what the run *writes* (results, tier directories, the I/O log) goes under the working
directory, as fio's ``directory=`` and every shell command's output do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import small_spec

from kvbench_core.cli import main

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.skipif(not (DATA / "model_configs" / "Llama-3.2-1B.json").exists(), reason="shared sample data absent")
def test_inputs_are_read_from_the_spec_folder_and_outputs_written_under_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kvbench_nvme")
    specs, work = tmp_path / "specs", tmp_path / "work"
    (specs / "configs").mkdir(parents=True)
    work.mkdir()
    shutil.copy(DATA / "model_configs" / "Llama-3.2-1B.json", specs / "configs" / "llama.json")
    raw = small_spec(model={"name": None, "config": "configs/llama.json"}, requests=4,
                     output={"directory": "out", "io_log": "io.jsonl", "keep_files": True},
                     cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "1MiB"},
                                      {"name": "disk", "backend": "nvme", "capacity": "256MiB",
                                       "options": {"path": "cache", "fsync": False}}]})
    del raw["model"]["name"]
    (specs / "spec.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.chdir(work)
    assert main(["run", str(specs / "spec.yaml"), "--quiet", "--exit-zero"]) == 0  # 4 requests: inconclusive
    (result_file,) = (work / "out").glob("*.json")
    result = json.loads(result_file.read_text())
    assert result["model"]["source"] == str(specs / "configs" / "llama.json")  # read from the spec folder
    assert result["model"]["layers"] == 16
    assert (work / "io.jsonl").is_file() and any((work / "cache").iterdir())  # kept: keep_files
    assert sorted(p.name for p in specs.iterdir()) == ["configs", "spec.yaml"]  # nothing written beside the spec
