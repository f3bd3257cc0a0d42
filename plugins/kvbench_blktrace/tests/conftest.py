"""A stand-in ``bpftrace`` executable for lifecycle tests that must not need root or a kernel tracer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from testkit import sigint_reaches_children

CAPTURE = Path(__file__).parent / "data" / "bpftrace-fio-randrw.txt"

sigint_reaches_children()  # the stand-in bpftrace traps the SIGINT that stops it


@pytest.fixture
def fake_bpftrace(tmp_path: Path) -> Callable[[str], str]:
    """``make(body)`` -> path of an executable shell script that runs ``body`` (``--version`` answered)."""
    def make(body: str) -> str:
        script = tmp_path / "bpftrace"
        script.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "bpftrace v0.0-fake"; exit 0; fi\n{body}')
        script.chmod(0o755)
        return str(script)

    return make


@pytest.fixture
def printing_bpftrace(fake_bpftrace: Callable[[str], str]) -> str:
    """A stand-in that attaches at once and, on SIGINT, prints the real capture's maps and exits 0, as bpftrace does."""
    return fake_bpftrace(f"trap 'cat \"{CAPTURE}\"; exit 0' INT\necho 'kvbench-trace: attached'\n"
                         "while :; do sleep 0.05; done\n")
