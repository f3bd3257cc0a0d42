"""Entries are streamed: moving a 256 MiB entry must not grow the process by anything like 256 MiB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kvbench_nvme.uring import unavailable_reason

ENTRY = 256 << 20

SCRIPT = """
import json, resource, sys
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool, ChecksumSink
from kvbench_nvme.backend import NVMeBackend

pool = NoisePool(seed=3, pool_bytes=16 << 20, max_piece=4 << 20)
backend = NVMeBackend({"path": sys.argv[1], "fsync": False, "drop_cache": False, "queue_depth": 4,
                       "transfer_size": "1MiB", "engine": sys.argv[3]},
                      BackendContext(tier_name="nvme0", run_id="mem"))
backend.open()
backend.write("warm", pool.payload("warm", 8 << 20))  # pool threads and their buffers exist now
backend.read("warm", 8 << 20, ChecksumSink())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
backend.write("big", pool.payload("big", int(sys.argv[2])))
sink = ChecksumSink()
backend.read("big", int(sys.argv[2]), sink)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
backend.close()
print(json.dumps({"growth_kib": after - before, "read": sink.nbytes}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["psync", "io_uring"])
def test_peak_rss_growth_stays_far_below_the_entry_size(tmp_path: Path, engine: str) -> None:
    if engine == "io_uring" and (reason := unavailable_reason()) is not None:
        pytest.skip(f"io_uring unavailable here: {reason}")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "tier"), str(ENTRY), engine],
                          capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout)
    assert result["read"] == ENTRY
    assert result["growth_kib"] * 1024 < ENTRY // 16, result  # < 16 MiB for a 256 MiB entry
