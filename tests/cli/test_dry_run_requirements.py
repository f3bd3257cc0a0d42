"""``--dry-run`` refuses what the run's set-up would before touching storage (issue #31 §5): a tier whose
driver or optional package is missing here, a codec without its package, an output format without the
reports extra: the same line and exit code as the run, and no directory or file created."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench_core.cli import main


def _spec(tmp_path: Path, **extra: Any) -> Path:
    spec = {"version": 1, "name": "req", "seed": 1, "model": {"name": "tiny-1b"}, "requests": 4,
            "workload": {"users": 1, "generation": "none"},
            "cache": {"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64MiB"}]},
            "output": {"directory": str(tmp_path / "out"), "progress": "off"}, **extra}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert "Traceback" not in err.getvalue()
    return code, err.getvalue()


def _dry_and_real(tmp_path: Path, spec: Path) -> tuple[tuple[int, str], tuple[int, str]]:
    dry = _cli("run", str(spec), "--dry-run")
    assert not (tmp_path / "out").exists() and not (tmp_path / "gds").exists()  # nothing created
    return dry, _cli("run", str(spec), "--quiet")


def _driver_missing() -> bool:
    from kvbench_gds.probe import driver_problem

    return driver_problem() is not None


@pytest.mark.skipif(not _driver_missing(), reason="this machine has the NVIDIA driver: GDS would not be refused")
def test_a_gds_tier_without_the_driver_is_refused_by_the_dry_run_as_by_the_run(tmp_path: Path) -> None:
    spec = _spec(tmp_path, cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64MiB"},
                                            {"name": "gds", "backend": "gds", "capacity": "1GiB",
                                             "options": {"path": str(tmp_path / "gds")}}]})
    (dry_code, dry_err), (run_code, run_err) = _dry_and_real(tmp_path, spec)
    assert dry_code == run_code != 0
    assert dry_err.count("\n") == 1 and "driver" in dry_err
    assert dry_err.splitlines()[0] in run_err


def test_a_codec_without_its_package_is_refused_by_the_dry_run(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cramjam", None)  # not importable, as on a machine without the extra
    spec = _spec(tmp_path, cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "64MiB",
                                             "codec": "zstd"}]})
    (dry_code, dry_err), (run_code, run_err) = _dry_and_real(tmp_path, spec)
    assert dry_code == run_code == 2
    assert "cramjam" in dry_err and dry_err.splitlines()[0] in run_err


def test_an_output_format_without_its_extra_is_refused_by_the_dry_run(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xlsxwriter", None)
    spec = _spec(tmp_path, output={"directory": str(tmp_path / "out"), "progress": "off", "formats": ["xlsx"]})
    (dry_code, dry_err), (run_code, run_err) = _dry_and_real(tmp_path, spec)
    assert dry_code == run_code == 2
    assert "xlsxwriter" in dry_err and dry_err == run_err


def test_a_spec_whose_requirements_are_here_dry_runs_clean(tmp_path: Path) -> None:
    code, err = _cli("run", str(_spec(tmp_path)), "--dry-run")
    assert code == 0 and err == ""


def test_live_metrics_without_their_extra_are_refused_by_the_dry_run(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    spec = _spec(tmp_path, output={"directory": str(tmp_path / "out"), "progress": "off", "metrics": {"port": 9}})
    (dry_code, dry_err), (run_code, run_err) = _dry_and_real(tmp_path, spec)
    assert dry_code == run_code == 2
    assert "kvbench-core[metrics]" in dry_err and dry_err == run_err
