"""Whole kvbench runs on the nixl tier with ``verify: true``: every byte read back is the byte written, the
declaration says NIXL, nothing is left behind, and credentials appear in no output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from nixl_helpers import bucket_keys, needs_nixl
from s3_servers import MotoServer
from tiny_spec import history_spec

pytestmark = needs_nixl
SECRET = "nixl-run-secret-7f3a9c"
KEY_ID = "AKIDNIXLRUNMARKER"


def run_kvbench(tmp_path: Path, tier_options: dict[str, Any], env: dict[str, str]) -> tuple[int, str, dict[str, Any]]:
    """``kvbench run`` as a child process (NIXL's C++ logs go to the process's own stderr): (exit code,
    stdout + stderr, the result document)."""
    tier = {"name": "nx", "backend": "nixl", "capacity": "64MiB", "options": tier_options}
    spec = history_spec([tier], verify=True, output={"directory": str(tmp_path / "out"), "progress": "off"})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    process = subprocess.run([sys.executable, "-m", "kvbench_core.cli", "run", str(path), "--quiet"],
                             capture_output=True, text=True, env=env, timeout=240)
    results = sorted((tmp_path / "out").glob("*.json"))
    assert len(results) == 1, process.stderr
    return process.returncode, process.stdout + process.stderr, json.loads(results[0].read_text())


def check_verified(result: dict[str, Any], mechanism: str) -> None:
    verify = result["metrics"]["verify"]
    assert verify["integrity_errors"] == 0 and verify["mismatches"] == []
    assert verify["bytes_verified"] > 0
    assert result["metrics"]["cache"]["reads_served_by_tier"].get("nx", 0) > 0
    access = result["declaration"]["access"]["per_tier"]["value"]["nx"]
    assert access["access_mechanism"].startswith(mechanism)
    assert access["driver_layer"].startswith("NIXL ")


def test_posix_run_verifies_every_byte_and_leaves_nothing(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "NIXL_LOG_LEVEL"}
    code, output, result = run_kvbench(tmp_path, {"nixl_backend": "POSIX", "path": str(tmp_path / "tier"),
                                                  "transfer_size": "256KiB", "queue_depth": 4}, env)
    assert code == 0, output
    check_verified(result, "NIXL POSIX")
    assert "NIXL INFO" not in output  # NIXL's chatter stays off kvbench's output unless the user asks
    assert not (tmp_path / "tier").exists()


@pytest.mark.s3
def test_obj_run_verifies_every_byte_and_keeps_credentials_out(tmp_path: Path, moto_server: MotoServer) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "NIXL_LOG_LEVEL": "TRACE"}  # NIXL at its most talkative must not print them either
    bucket = "kvbn-run"
    code, output, result = run_kvbench(tmp_path, {
        "nixl_backend": "OBJ", "bucket": bucket, "create_bucket": True, "endpoint_url": moto_server.url,
        "region": "us-east-1", "transfer_size": "256KiB", "queue_depth": 4}, env)
    assert code == 0, output[-3000:]
    check_verified(result, "NIXL OBJ")
    everything = output + json.dumps(result) + "".join(p.read_text() for p in (tmp_path / "out").iterdir())
    assert SECRET not in everything and KEY_ID not in everything
    assert bucket_keys(moto_server.url, bucket) == []
