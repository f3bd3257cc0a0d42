"""NIXL's GDS plugins on a GPU host: round trips from registered DRAM and VRAM (skipped elsewhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nixl_helpers import OpenBackend, needs_nixl

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.contracts.payload import NoisePool


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


pytestmark = [needs_nixl, pytest.mark.gpu,
              pytest.mark.skipif(not _cuda(), reason="needs an NVIDIA GPU, its driver and a CUDA build of torch")]


@pytest.mark.parametrize("backend", ["GDS", "GDS_MT"])
@pytest.mark.parametrize("memory", ["DRAM", "VRAM"])
def test_gds_round_trip(open_backend: OpenBackend, verify: Any, pool: NoisePool, tmp_path: Path, backend: str,
                        memory: str) -> None:
    tier = open_backend({"nixl_backend": backend, "memory": memory, "path": str(tmp_path / "tier"),
                         "transfer_size": "64KiB", "queue_depth": 4})
    for size in (4096, 64 << 10, 5 * (64 << 10) + 4099):
        tier.write(f"g{size}", pool.payload(f"g{size}", size))
        verify(tier, f"g{size}", size)
        timing = tier.read(f"g{size}", size, DISCARD)
        assert timing.host + timing.device <= timing.total
    assert tier.describe()["access_mechanism"].startswith(f"NIXL {backend}")
