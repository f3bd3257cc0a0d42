"""A file tier's directory that does not exist (issue #29): created only inside one that does, unless the tier
says ``create: true``, and what kvbench created is said in the result's ``warnings`` and the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import HAS_NVME, small_spec

from kvbench_core.cli import main

pytestmark = pytest.mark.skipif(not HAS_NVME, reason="the kvbench-nvme plugin is not installed")


def nvme_spec(path: Path, out: Path, **options: Any) -> dict[str, Any]:
    return small_spec(requests=6, cache={"tiers": [
        {"name": "dram", "backend": "cpu", "capacity": "4MiB"},
        {"name": "nvme", "backend": "nvme", "capacity": "256MiB", "options": {"path": str(path), **options}}]},
        output={"directory": str(out), "progress": "off"})


def everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_directory_whose_parent_is_missing_is_refused_in_one_line_and_nothing_is_created(
        tmp_path: Path, write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``/mnt/nvme0/kvbench`` mistyped as ``/mnt/nvme9/kvbench`` grew /mnt/nvme9 silently before."""
    target = tmp_path / "typo" / "deeper" / "kv"
    spec = write_spec(nvme_spec(target, tmp_path / "out"))
    for extra in (["--dry-run"], ["--quiet"]):
        assert main(["run", str(spec), *extra]) == 2
        assert capsys.readouterr().err == (
            f"kvbench: error: cache.tiers[1].options.path: {target}: its parent {target.parent} does not exist; "
            "create it, or set create: true in the tier's options to let kvbench make it\n")
    assert everything(tmp_path) == ["spec.yaml"]


def test_spec_validate_notes_a_missing_parent_as_this_machine_s_and_creates_nothing(
        tmp_path: Path, write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The parent is a fact of the machine, not of the spec (a GDS spec names its host's /mnt/nvme): valid,
    with a note saying `kvbench run` refuses it here."""
    target = tmp_path / "typo" / "deeper" / "kv"
    spec = write_spec(nvme_spec(target, tmp_path / "out"))
    assert main(["spec", "validate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{spec}: valid\n")
    assert out.endswith(f"  note: on this machine cache.tiers[1].options.path: {target}: its parent {target.parent} "
                        "does not exist; create it, or set create: true in the tier's options to let kvbench make it "
                        "(kvbench run refuses it here)\n")
    assert everything(tmp_path) == ["spec.yaml"]


def test_create_true_makes_the_parents_and_the_result_and_summary_say_so(
        tmp_path: Path, write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "new" / "deeper" / "kv"
    spec = write_spec(nvme_spec(target, tmp_path / "out", create=True))
    code = main(["run", str(spec)])
    out = capsys.readouterr().out
    assert code in (0, 7), out  # 7: inconclusive, a 6-request run has too few requests for a p95
    said = f"tier 'nvme' (nvme): created {target} and its missing parents from {tmp_path / 'new'}"
    assert f"  WARNING: {said}\n" in out
    (result,) = (tmp_path / "out").glob("*.json")
    assert said in json.loads(result.read_text())["warnings"]
    assert not (tmp_path / "new").exists()  # what kvbench created and emptied, it removes


def test_a_new_directory_inside_an_existing_one_is_created_and_said(
        tmp_path: Path, write_spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "kv"
    spec = write_spec(nvme_spec(target, tmp_path / "out"))
    main(["run", str(spec), "--quiet"])
    (result,) = (tmp_path / "out").glob("*.json")
    warnings = json.loads(result.read_text())["warnings"]
    assert f"tier 'nvme' (nvme): created {target}" in warnings
    assert not target.exists()
