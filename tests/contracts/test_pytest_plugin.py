"""kvbench's pytest plugin (``pytest11``): ``pytest --kvbench-conformance=cpu`` runs the conformance suite
as parametrized tests and passes, fails on a planted bug, refuses a bad backend or options in one line, and
its fixtures (payload, verify, scratch tier, fake clock) serve a vendor's own test.  Each case runs pytest
in a subprocess in an empty directory, as a vendor's checkout would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLANTED_BUG = '''
from kvbench_core.builtins.memory import CPUMemoryBackend

_read = CPUMemoryBackend.read


def _corrupting_read(self, key, size, sink):
    """Hands the sink one wrong byte in every entry over 100 bytes: the bug a round trip must catch."""
    class Corrupting:
        def consume(self, offset, data):
            if offset == 0 and len(data) > 100:
                data = bytearray(data)
                data[100] ^= 0xFF
                data = memoryview(data)
            sink.consume(offset, data)
    return _read(self, key, size, Corrupting())


CPUMemoryBackend.read = _corrupting_read
'''

VENDOR_TEST = '''
def test_a_vendor_round_trip(kvbench_scratch_tier, kvbench_payload, kvbench_verify, kvbench_fake_clock):
    backend = kvbench_scratch_tier()  # the tier --kvbench-conformance names, with its options
    backend.write("entry", kvbench_payload.payload("entry", 300_000))
    kvbench_verify(backend, "entry", 300_000)
    start = kvbench_fake_clock()
    assert kvbench_fake_clock.advance(0.25) == start + 0.25 == kvbench_fake_clock()
'''


def _pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args],
                          cwd=where, env=env, capture_output=True, text=True, timeout=240)


def test_the_suite_passes_on_the_cpu_tier_one_test_per_check(tmp_path: Path) -> None:
    from kvbench_core.contracts.conformance import CHECKS

    done = _pytest(tmp_path, "--kvbench-conformance=cpu")
    assert done.returncode == 0, done.stdout[-2000:]
    for check in CHECKS:
        assert f"test_conformance[{check}]" in done.stdout
    assert " failed" not in done.stdout


def test_the_suite_fails_on_a_planted_bug(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(PLANTED_BUG)
    done = _pytest(tmp_path, "--kvbench-conformance=cpu")
    assert done.returncode == 1, done.stdout[-2000:]
    assert "FAILED" in done.stdout and "test_conformance[round_trip]" in done.stdout
    assert "PASSED" in done.stdout  # the checks the bug does not touch still pass: one test per check


@pytest.mark.slow
def test_a_directory_tier_gets_a_scratch_directory_and_the_fixtures_serve_a_vendors_test(tmp_path: Path) -> None:
    (tmp_path / "test_vendor.py").write_text(VENDOR_TEST)
    done = _pytest(tmp_path, "--kvbench-conformance=nvme", "--kvbench-options", "{fsync: false}", "test_vendor.py")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "test_vendor.py::test_a_vendor_round_trip" in done.stdout and "test_conformance[cleanup]" in done.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["--kvbench-conformance=nope"], "unknown backend 'nope'; installed:"),
    (["--kvbench-conformance=cpu", "--kvbench-options", "[1, 2"], "--kvbench-options: not YAML or JSON"),
    (["--kvbench-conformance=nvme", "--kvbench-options", "{queue_depth: many}"], "--kvbench-options.queue_depth"),
])
def test_a_bad_backend_or_options_is_one_clear_line(tmp_path: Path, args: list[str], says: str) -> None:
    done = _pytest(tmp_path, *args)
    assert done.returncode != 0 and says in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
