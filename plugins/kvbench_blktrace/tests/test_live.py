"""A real traced kvbench run on this machine (root, bpftrace, tracefs), then its fio job; skipped with the
reason where tracing is not permitted."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kvbench_blktrace.tracer import TracingUnavailable, preflight

from kvbench_core.cli import main

pytest.importorskip("kvbench_nvme", reason="the live run needs the kvbench-nvme file tier")


@pytest.mark.slow
def test_traced_run_records_kernel_histograms_and_distils_to_fio(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "kv"
    cache.mkdir()
    try:
        preflight([str(cache)])
    except TracingUnavailable as error:
        pytest.skip(f"block tracing is not permitted here: {error}")
    spec = {
        "version": 1, "name": "live-trace", "seed": 3, "model": {"name": "llama3.2-1b"}, "duration": "6s",
        "workload": {"users": 2, "max_inflight": 2, "options": {"profile_mix": {"chatbot": 1}}},
        "cache": {"tiers": [{"name": "nvme", "backend": "nvme", "capacity": "512MiB",
                             "options": {"path": str(cache), "transfer_size": "256KiB"}}]},
        "tracing": {"mode": "block", "required": True, "attach_timeout": "300s"},
        "output": {"directory": str(tmp_path / "results")},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "spec.yaml"), "--quiet", "--exit-zero"]) == 0  # 6 s: a p95 needs 20 requests
    (path,) = (tmp_path / "results").glob("live-trace-*.json")
    result = json.loads(path.read_text())
    assert result["run"]["traced"] is True
    section = result["sections"]["block_trace"]
    hists = section["histograms"]
    assert section["paths"] == {"nvme": str(cache.resolve())}
    assert section["totals"]["write"]["ios"] > 0 and hists["d2c_write_us"]["count"] > 0
    # kvbench's own pwrite64 calls and per-entry fsyncs, seen by the kernel
    assert hists["syscall_write_us"]["count"] >= result["metrics"]["tiers"]["nvme"]["write"]["commands"] > 0
    assert hists["syscall_fsync_us"]["count"] >= result["metrics"]["tiers"]["nvme"]["write"]["ops"]
    assert set(section["l4"]["nvme"]) == {"read", "write"}

    capsys.readouterr()
    assert main(["fio", str(path), "--source", "block-trace"]) == 0
    job = capsys.readouterr().out
    assert "; source: block trace" in job and "bssplit=" in job
    if shutil.which("fio"):
        (tmp_path / "job.fio").write_text(job)
        done = subprocess.run(["fio", "--parse-only", str(tmp_path / "job.fio")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
