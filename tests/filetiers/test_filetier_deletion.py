"""A file tier's entries are deleted while the result is written, and never left behind (issue 32 §4).

The behaviour, not the time: the result exists before the last entry file is deleted; ``kvbench run``
returns only once every file is gone (after a SIGTERM during the deletion too); a file kvbench could not
delete is named in the result's warnings and removed by the next run on the directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.cli import main as kvbench_main

pytest.importorskip("kvbench_nvme")

REAL_UNLINK = os.unlink


def write_spec(tmp_path: Path) -> Path:
    """Two seconds of one user writing entries to a directory tier alone: every entry is a file."""
    spec = {"version": 1, "name": "deletion", "seed": 7, "model": {"name": "qwen2.5-0.5b", "dtype": "bf16"},
            "duration": "2s", "warmup": "0s",
            "workload": {"source": "synthetic", "users": 2, "max_inflight": 2, "generation": "fast",
                         "options": {"profile_mix": {"chatbot": 1}}},
            "cache": {"tiers": [{"name": "disk", "backend": "nvme", "capacity": "4GiB",
                                 "options": {"path": str(tmp_path / "kvcache")}}]},
            "output": {"directory": str(tmp_path / "results")}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def entry_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "kvcache").glob("*.kv")) if (tmp_path / "kvcache").exists() else []


def results(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted((tmp_path / "results").glob("*.json"))]


def patched_unlink(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, on_entry: Callable[[str], None]) -> None:
    """``os.unlink`` calls ``on_entry`` first for every entry file under ``tmp_path``; others pass."""
    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).startswith(str(tmp_path / "kvcache")) and str(path).endswith(".kv"):
            on_entry(str(path))
        REAL_UNLINK(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)


def test_the_result_is_written_before_the_entries_are_deleted_and_none_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    release, deleting = threading.Event(), threading.Event()

    def hold(_path: str) -> None:  # the deletion's first unlink waits until the test has looked
        deleting.set()
        release.wait(60)

    patched_unlink(monkeypatch, tmp_path, hold)
    codes: list[int] = []
    session = threading.Thread(target=lambda: codes.append(kvbench_main(["run", "-q", "--exit-zero",
                                                                          str(write_spec(tmp_path))])))
    session.start()
    deadline = time.monotonic() + 120
    while not results(tmp_path) and session.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert deleting.is_set() and results(tmp_path)  # the result is written while the deletion is held
        assert session.is_alive() and entry_files(tmp_path)  # and kvbench run waits for the deletion
    finally:
        release.set()
        session.join(120)
    assert codes == [0], capsys.readouterr().out
    assert not entry_files(tmp_path) and not (tmp_path / "kvcache").exists()
    assert "  cleanup: tier 'disk' (nvme): deleted" in capsys.readouterr().out


REFUSE_FIRST = """
import os, sys
real, stuck = os.unlink, []
def unlink(path, *args, **kwargs):
    if str(path).endswith(".kv") and (not stuck or stuck[0] == str(path)):
        stuck[:1] = [str(path)]
        raise PermissionError(1, "Operation not permitted", path)
    real(path, *args, **kwargs)
os.unlink = unlink
"""
CLI = "import sys; from kvbench_core.cli import main; sys.exit(main(sys.argv[1:]))"


def run_cli(spec: Path, before: str = "") -> subprocess.CompletedProcess[str]:
    """``kvbench run`` in a process of its own (whose pid is gone afterwards, as a finished run's is)."""
    return subprocess.run([sys.executable, "-c", before + CLI, "run", "-q", "--exit-zero", str(spec)],
                          capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.slow
def test_a_file_that_cannot_be_deleted_is_in_the_warnings_and_the_next_run_removes_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    run_cli(spec, REFUSE_FIRST)
    (first,) = results(tmp_path)
    (stuck,) = entry_files(tmp_path)
    assert any("could not delete 1 entry files" in line and str(stuck) in line for line in first["warnings"])
    run_cli(spec)
    second = next(result for result in results(tmp_path) if result["run"]["id"] != first["run"]["id"])
    assert any(f"left by run {first['run']['id']}" in line for line in second["warnings"])
    assert not entry_files(tmp_path)


SLOW_DELETION = """
import os, time
real = os.unlink
def unlink(path, *args, **kwargs):
    if str(path).endswith(".kv"):
        time.sleep(0.3)
    real(path, *args, **kwargs)
os.unlink = unlink
"""


@pytest.mark.slow
def test_a_sigterm_during_the_deletion_still_leaves_no_file(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    process = subprocess.Popen([sys.executable, "-c", SLOW_DELETION + CLI, "run", "-q", "--exit-zero", str(spec)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not results(tmp_path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert results(tmp_path) and entry_files(tmp_path), "the run ended before its deletion could be signalled"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert not entry_files(tmp_path) and not (tmp_path / "kvcache").exists(), err
    assert "  cleanup: tier 'disk' (nvme): deleted" in out
