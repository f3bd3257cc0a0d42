"""GPU-origin payloads are byte-identical to the host generator's, so verified reads still work."""

from __future__ import annotations

import numpy as np
import pytest
from gds_fakes import HAS_TORCH

from kvbench_core.contracts.payload import NoisePool, entry_id_for

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

PIECE = 64 << 10


@pytest.fixture(scope="module")
def pool() -> NoisePool:
    return NoisePool(seed=11, pool_bytes=256 << 10, max_piece=PIECE)


def host_bytes(pool: NoisePool, key: str, offset: int, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.uint8)
    for start in range(0, n, pool.max_piece):
        pool.render(entry_id_for(key), offset + start, out[start:start + pool.max_piece])
    return out


@pytest.mark.parametrize(("offset", "n"), [
    (0, 1), (0, 15), (0, 16), (0, 17), (0, 512), (0, 513), (0, 4099), (4096, PIECE), (PIECE, 3 * PIECE + 5),
    (512, 100), (16, 600), (100, 1000), (256 << 10, 8192),
])
@pytest.mark.parametrize("key", ["a", "user7-turn3-layer0"])
def test_device_render_matches_the_host_generator(pool: NoisePool, key: str, offset: int, n: int) -> None:
    import torch
    from kvbench_gds.gpu_payload import DeviceNoise

    device_noise = DeviceNoise(pool, "cpu", max_piece=PIECE)
    out = torch.empty(n, dtype=torch.uint8)
    device_noise.render(entry_id_for(key), offset, out)
    assert np.array_equal(out.numpy(), host_bytes(pool, key, offset, n))


def test_a_smaller_device_piece_renders_in_chunks(pool: NoisePool) -> None:
    import torch
    from kvbench_gds.gpu_payload import DeviceNoise

    device_noise = DeviceNoise(pool, "cpu", max_piece=4096)
    out = torch.empty(3 * 4096 + 7, dtype=torch.uint8)
    device_noise.render(entry_id_for("k"), 8192, out)
    assert np.array_equal(out.numpy(), host_bytes(pool, "k", 8192, out.shape[0]))
