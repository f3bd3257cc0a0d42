"""Watching a run of local processes from outside: its spawned children, and the moment it measures.

Shared by the tests of local clients and of worker processes (tests/scaleout/), which kill one child of a
real run in mid-measurement and judge how the run ends.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
from pathlib import Path

import pytest


def spawned_children(parent: int) -> list[int]:
    """The parent's spawned client or worker processes (not multiprocessing's resource tracker)."""
    pids = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        for pid in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
                pids.append(int(pid))
    return pids


def start_measuring(spec: Path, *args: str, banner: str) -> subprocess.Popen[str]:
    """Start ``kvbench run spec *args`` and return once a progress line starts with ``banner`` (e.g.
    ``2 clients [measuring``: the set-up line has the same prefix, so the bracket's word matters)."""
    process = subprocess.Popen([sys.executable, "-m", "kvbench_core.cli", "run", str(spec), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stderr], [], [], 1.0)
        if ready:
            line = process.stderr.readline()
            seen += line
            if line.startswith(banner):
                return process
        assert process.poll() is None, seen
    process.kill()
    pytest.fail(f"no measurement progress within 120 s:\n{seen}")
