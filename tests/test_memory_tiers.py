"""The memory tiers move bytes: a read copies the entry into a reused destination buffer, never hands out
the stored blocks themselves (a view costs nothing and reports bandwidths above memcpy's)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HAS_TORCH

from kvbench_core.builtins.memory import BLOCK, CPUMemoryBackend, GPUMemoryBackend
from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.buffers import fill_pieces
from kvbench_core.engine.payload import NoisePool


class Collect:
    """Keeps the address of every view it is handed, and the bytes."""

    def __init__(self) -> None:
        self.addresses: list[int] = []
        self.data = bytearray()

    def consume(self, offset: int, data: memoryview) -> None:
        self.addresses.append(np.frombuffer(data, dtype=np.uint8).ctypes.data)
        self.data += data


def expected_bytes(pool: NoisePool, key: str, size: int) -> bytearray:
    out = bytearray(size)
    fill_pieces(pool.payload(key, size), 0, memoryview(out), BLOCK)
    return out


def test_a_dram_read_copies_into_one_reused_buffer_not_the_stored_blocks() -> None:
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t"))
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=BLOCK)
    size = 2 * BLOCK + 123
    backend.write("k", pool.payload("k", size))
    stored = [block.ctypes.data for block in backend._entry("k")]
    first, second = Collect(), Collect()
    backend.read("k", size, first)
    backend.read("k", size, second)
    assert not set(first.addresses) & set(stored)  # the sink saw copies, not the tier's own memory
    assert len(set(first.addresses + second.addresses)) == 1  # one destination, reused block after block
    assert first.data == second.data == expected_bytes(pool, "k", size)


@pytest.mark.skipif(not HAS_TORCH, reason="the gpu tier needs torch (pip install 'kvbench-core[gpu]')")
def test_a_gpu_read_restores_on_the_device_and_stages_to_the_host_only_for_a_sink() -> None:
    backend = GPUMemoryBackend({"device": "cpu"}, BackendContext(tier_name="gpu", run_id="t"))
    backend.open()
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=16 << 20)
    backend.write("k", pool.payload("k", 1000))
    staged = backend._pinned
    backend._pinned = lambda: pytest.fail("a discarded read staged its bytes to the host")
    backend.read("k", 1000, DISCARD)
    backend._pinned = staged
    restore = backend._restore_buffer()
    assert restore.data_ptr() != backend.tensor("k").data_ptr()
    sink = Collect()
    backend.read("k", 1000, sink)
    assert sink.data == expected_bytes(pool, "k", 1000) and backend._restore_buffer() is restore
