"""A standalone capture (the program traced around any process) distilled into an fio job."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvbench_blktrace.__main__ import main
from kvbench_blktrace.capture import CaptureError, capture_as_result, traced_seconds
from kvbench_blktrace.parse import parse_maps

CAPTURE = Path(__file__).parent / "data" / "bpftrace-fio-randrw.txt"


def job_options(job: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in job.splitlines() if "=" in line and not line.startswith(";"))


def test_the_capture_says_how_long_it_ran() -> None:
    assert traced_seconds(CAPTURE.read_text()) == 6.759
    assert traced_seconds("@n: 1\n") is None


def test_the_document_carries_the_traced_block_bytes_as_one_tier() -> None:
    text = CAPTURE.read_text()
    result = capture_as_result(text, name="vllm", directory="/mnt/kv")
    section = result["sections"]["block_trace"]
    sizes = parse_maps(text)["bs_read"]
    assert result["metrics"]["tiers"]["traced"]["read"]["bytes"] == sum(int(k) * v for k, v in sizes.items())
    assert result["metrics"]["window"]["measured_s"] == 6.759
    assert section["paths"] == {"traced": "/mnt/kv"}


def test_the_cli_writes_a_job_from_the_capture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fio", str(CAPTURE), "--name", "fio-randrw", "--directory", "/mnt/kv", "--runtime", "5m"]) == 0
    job = capsys.readouterr().out
    options = job_options(job)
    assert "[kvbench-fio-randrw]" in job and "; source: block trace (standalone bpftrace capture)" in job
    assert options["rw"] == "randrw" and 55 <= int(options["rwmixread"]) <= 75  # fio ran 70% reads
    assert options["runtime"] == "300" and options["directory"] == "/mnt/kv"
    assert "4k/" in options["bssplit"] and "128k/" in options["bssplit"]  # the job's block sizes are there


def test_a_capture_without_its_runtime_or_block_requests_is_a_clear_error(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.txt"
    old.write_text("@bs_read[4096]: 3\n")
    assert main(["fio", str(old)]) == 2
    assert "give --runtime" in capsys.readouterr().err
    with pytest.raises(CaptureError, match="no block read or write requests"):
        capture_as_result("kvbench-trace: traced_ms 5000\n@flush_ios: 1\n", name="x", directory=".")
    assert main(["fio", str(tmp_path / "missing.txt")]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def test_the_program_form_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pid", "1", "--path", str(tmp_path)]) in (0, 2)  # 2: this disk cannot be traced here
    out = capsys.readouterr()
    assert "kvbench-trace: attached" in out.out or out.err.startswith("kvbench_blktrace:")
