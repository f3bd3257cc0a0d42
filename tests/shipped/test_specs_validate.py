"""Every spec in ``specs/`` validates on any machine (a spec is valid where it is written, not only on the host
it names): ``kvbench spec validate`` passes each, and a tier directory whose parent is missing here (the GDS
specs' ``/mnt/nvme``) is a note, which ``kvbench run`` refuses on this machine (tests/filetiers/
test_tier_directories.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench_core.cli import main

SPECS = sorted((Path(__file__).resolve().parents[2] / "specs").glob("*.yaml"))


@pytest.mark.parametrize("path", SPECS, ids=[path.stem for path in SPECS])
def test_a_shipped_spec_validates_here(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate", str(path)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith(f"{path}: valid\n")
