"""The real thing on a GPU host: kvikio, a CUDA device and (where the system allows) cuFile DMA.

Skipped with the reason everywhere else.  ``KVBENCH_GDS_DIR`` points the tier at a
directory on the NVMe under test (default: pytest's tmp_path, which is rarely on a
GDS-capable filesystem, so the declaration will honestly say "not GDS").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from gds_fakes import gpu_host_problem

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance, remaining_files
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.engine.run.factory import create_backend

PROBLEM = gpu_host_problem()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(PROBLEM is not None, reason=f"not a GDS-ready GPU host: {PROBLEM}")]

DIRECTORY = os.environ.get("KVBENCH_GDS_DIR", "{tmp_path}") + "/kvbench-gds-test"


class TestGDSOnGPUHostOrigin(BackendConformance):
    backend_name = "gds"
    backend_options: ClassVar = {"path": DIRECTORY, "transfer_size": "1MiB", "task_size": "256KiB"}

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return remaining_files(backend.directory.path)


class TestGDSOnGPUGPUOrigin(TestGDSOnGPUHostOrigin):
    backend_options: ClassVar = {**TestGDSOnGPUHostOrigin.backend_options, "payload_origin": "gpu"}


def open_tier(tmp_path: Path, **options: Any) -> Any:
    path = DIRECTORY.replace("{tmp_path}", str(tmp_path))
    tier = {"name": "gds", "backend": "gds", "options": {"path": path, **options}}
    backend = create_backend(tier, BackendContext(tier_name="gds", run_id="gputest"))
    backend.open()
    return backend


def test_a_gpu_tier_entry_reaches_storage_without_a_host_copy(tmp_path: Path) -> None:
    from kvbench_core.builtins.memory import GPUMemoryBackend

    pool = NoisePool(seed=9, pool_bytes=8 << 20, max_piece=16 << 20)
    hbm = GPUMemoryBackend({"device": "cuda"}, BackendContext(tier_name="hbm", run_id="gputest"))
    hbm.open()
    gds = open_tier(tmp_path)
    try:
        hbm.write("kv", pool.payload("kv", (32 << 20) + 4096))
        timing = gds.write_tensor("kv", hbm.tensor("kv"))
        assert timing.nbytes == (32 << 20) + 4096
        sink = VerifySink(pool, "kv", np.empty(gds.transfer_size, dtype=np.uint8))
        gds.read("kv", timing.nbytes, sink)
        assert sink.mismatches == 0
    finally:
        gds.close()
        hbm.close()


@pytest.mark.parametrize("compat_mode", ["on", "auto"])
def test_the_declaration_matches_kvikios_own_verdict(tmp_path: Path, compat_mode: str) -> None:
    import kvikio

    gds = open_tier(tmp_path, compat_mode=compat_mode)
    try:
        info = gds.describe()
        assert info["kvikio_version"] == kvikio.__version__
        assert info["kvikio_compat_mode"] == bool(kvikio.defaults.is_compat_mode_preferred())
        if info["kvikio_compat_mode"]:
            assert info["gds"] is False
        if compat_mode == "on":
            assert info["access_mechanism"].startswith("kvikio compatibility mode")
        print(f"\n{compat_mode}: gds={info['gds']} {info['access_mechanism']} ({info['not_gds_because']})")
    finally:
        gds.close()
