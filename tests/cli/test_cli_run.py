"""``kvbench run``: runs a spec and writes its result, re-runs the spec a result carries, reports bad input
in one line, and on SIGINT/SIGTERM stops cleanly, writes the partial result and leaves no files behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import HAS_NVME, small_spec

from kvbench_core.cli import main


def result_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))


def test_run_writes_a_result_and_prints_its_path(write_spec: Any, tmp_path: Path, capsys: Any) -> None:
    spec = write_spec(small_spec(requests=20))  # a p95 needs 20 completed requests for "completed"
    assert main(["run", str(spec), "--quiet", "--output", str(tmp_path / "out"), "--set", "workload.users=2"]) == 0
    (path,) = result_files(tmp_path / "out")
    out = capsys.readouterr().out
    assert out.startswith("t [completed] request count reached; 20 requests completed\n")
    assert out.endswith(f"result: {path}\n")
    assert "\n  QoS service p95 / SLA: " in out  # each class's verdict, judged on service latency
    result = json.loads(path.read_text())
    assert result["run"]["status"] == "completed"
    assert result["spec"]["as_written"]["workload"]["users"] == 2  # the override is part of the spec it carries
    assert result["spec"]["as_written"]["output"]["directory"] == str(tmp_path / "out")


def test_a_result_the_output_directory_cannot_take_goes_to_the_temp_directory(
        write_spec: Any, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The output file system filling up during the run must not lose the measurement."""
    from kvbench_core.contracts.errors import InputFileError
    from kvbench_core.scaleout import session

    out, spare = tmp_path / "out", tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(session.tempfile, "tempdir", str(spare))
    real_write = session.write_result

    def full_disk(result: dict[str, Any], path: Path) -> Path:
        if Path(path).parent == out:
            raise InputFileError(f"{path}: cannot write the result: No space left on device")
        return real_write(result, path)

    monkeypatch.setattr(session, "write_result", full_disk)
    spec = write_spec(small_spec(requests=20))
    assert main(["run", str(spec), "--quiet", "--output", str(out)]) == 2
    (saved,) = result_files(spare)
    captured = capsys.readouterr()
    assert captured.out.startswith("t [completed] request count reached; 20 requests completed\n")
    assert captured.out.endswith(f"result: {saved}\n")
    assert captured.err == (f"kvbench: error: {out / saved.name}: cannot write the result: No space left on device; "
                            f"saved it to {saved} instead\n")
    assert json.loads(saved.read_text())["run"]["status"] == "completed"


def test_a_result_re_runs_exactly_the_spec_it_carries(write_spec: Any, tmp_path: Path, capsys: Any) -> None:
    spec = write_spec(small_spec(requests=20, output={"directory": str(tmp_path / "first")}))
    assert main(["run", str(spec), "--quiet"]) == 0
    (first,) = result_files(tmp_path / "first")
    assert main(["run", str(first), "--quiet"]) == 0
    rerun = [path for path in result_files(tmp_path / "first") if path != first]
    assert len(rerun) == 1
    original, again = json.loads(first.read_text()), json.loads(rerun[0].read_text())
    assert again["spec"]["sha256"] == original["spec"]["sha256"]
    assert again["spec"]["as_written"] == original["spec"]["as_written"]
    assert again["spec"]["resolved"] == original["spec"]["resolved"]
    assert again["run"]["id"] != original["run"]["id"]


def test_a_bad_spec_is_one_line_exit_two_and_writes_nothing(write_spec: Any, tmp_path: Path, capsys: Any) -> None:
    spec = write_spec(small_spec(output={"directory": str(tmp_path / "out")}))
    assert main(["run", str(spec), "--set", "workload.users=ten"]) == 2
    assert capsys.readouterr().err == (
        'kvbench: error: workload.users: expected integer >= 1 and <= 1000000, got "ten"\n')
    assert not (tmp_path / "out").exists()


# -- signals: a clean stop with a partial result -----------------------------------------------------------------


@pytest.mark.skipif(not HAS_NVME, reason="the kvbench-nvme plugin is not installed")
@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_cleanly_with_a_partial_result(write_spec: Any, tmp_path: Path, signum: int,
                                                             exit_code: int) -> None:
    tier, out = tmp_path / "tier", tmp_path / "out"
    spec = small_spec(duration="10m", output={"directory": str(out)},
                      cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "2MiB"},
                                       {"name": "disk", "backend": "nvme", "capacity": "256MiB",
                                        "options": {"path": str(tier), "fsync": False}}]})
    del spec["requests"]
    process = subprocess.Popen([sys.executable, "-m", "kvbench_core.cli", "run", str(write_spec(spec)), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tier.glob("*.kv")):  # the run is measuring and has entries on disk
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never wrote to its tier"
            time.sleep(0.05)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == exit_code, stderr
    assert "Traceback" not in stderr
    assert stderr.endswith(f"kvbench: interrupted by {signal.Signals(signum).name}\n")
    (path,) = result_files(out)
    assert stdout.endswith(f"result: {path}\n")
    result = json.loads(path.read_text())
    assert result["run"]["status"] == "interrupted"
    assert result["run"]["stop_reason"] == f"signal {signal.Signals(signum).name}"
    assert "headline" in result["metrics"]  # the partial measurement is kept
    assert not list(tier.glob("*.kv")) and not list(tier.glob("**/*.kv"))  # no files left behind
