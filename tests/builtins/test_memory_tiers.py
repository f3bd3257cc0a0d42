"""The memory tiers move bytes: a read copies the entry into reused destination buffers (for DRAM a ring
larger than the last-level cache), never hands out the stored blocks themselves (a view costs nothing and
reports bandwidths above memcpy's); the DRAM tier's arena is pre-faulted at set-up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import HAS_TORCH, small_spec
from testkit import CommandLog

from kvbench_core.builtins import dram_buffers
from kvbench_core.builtins.dram_buffers import last_level_cache_bytes
from kvbench_core.builtins.memory import BLOCK, CPUMemoryBackend, GPUMemoryBackend
from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.buffers import fill_pieces
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.run.setup import build_tiers
from kvbench_core.runspec.loader import load_plan


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


def test_a_dram_read_copies_into_a_ring_of_destinations_larger_than_the_last_level_cache() -> None:
    """Each block is copied (never the stored block handed out) into the next slot of a ring at least twice
    the last-level cache: a slot comes round again only after a ring's worth of other copies, so the
    destination is not cache-resident, as a GPU-side restore's is not; memory stays bounded by the ring."""
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t"))
    backend.open()
    ring = backend._restore
    assert ring.nbytes >= 2 * last_level_cache_bytes() and ring.slots >= 2
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=BLOCK)
    blocks = ring.slots + 2
    size = (blocks - 1) * BLOCK + 123
    backend.write("k", pool.payload("k", size))
    stored = [block.ctypes.data for block in backend._entry("k")]
    first, second = Collect(), Collect()
    backend.read("k", size, first)
    backend.read("k", size, second)
    assert not set(first.addresses + second.addresses) & set(stored)  # the sink saw copies
    assert len(set(first.addresses[:ring.slots])) == ring.slots  # one ring's worth: every copy a new slot
    assert first.addresses[ring.slots] == first.addresses[0]  # then round again, first in first out
    assert len(set(first.addresses + second.addresses)) == ring.slots  # bounded: the ring, nothing more
    assert first.data == second.data == expected_bytes(pool, "k", size)
    assert backend.describe()["restore_ring_bytes"] == ring.nbytes
    backend.close()  # a closed tier lets its ring go (about 1 GB on a large server), not at the next gc
    assert not ring._free and ring._made == 0


def test_the_last_level_cache_is_read_from_sysfs_with_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index, size in enumerate(("32K", "512K", "32768K")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    monkeypatch.setattr(dram_buffers.glob, "glob", lambda pattern: sorted(str(p) for p in tmp_path.glob("index*/size")))
    assert last_level_cache_bytes() == 32 << 20
    monkeypatch.setattr(dram_buffers.glob, "glob", lambda pattern: [])
    assert last_level_cache_bytes() == dram_buffers.FALLBACK_CACHE_BYTES


def test_prefault_puts_the_capacity_in_the_arena_at_set_up_and_writes_use_those_blocks() -> None:
    """With ``prefault`` (the default) the run's set-up hands the tier its capacity: that many blocks are
    allocated and touched then, and a write takes them instead of faulting in fresh memory."""
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t"))
    backend.reserve(4 * BLOCK + 5)
    reserved = {id(block) for block in backend._arena._free}
    assert len(reserved) == 4 and backend.describe()["prefaulted_bytes"] == 4 * BLOCK
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=BLOCK)
    backend.write("k", pool.payload("k", 4 * BLOCK))
    assert {id(block) for block in backend._entry("k")} == reserved and not backend._arena._free
    lazy = CPUMemoryBackend({"prefault": False}, BackendContext(tier_name="dram", run_id="t"))
    lazy.reserve(4 * BLOCK)
    assert not lazy._arena._free and lazy.describe()["prefaulted_bytes"] == 0


def test_a_run_prefaults_its_dram_tier_to_the_capacity(tmp_path: Path) -> None:
    """Through the run's set-up (engine/run/setup.build_tiers): the declared capacity is what is pre-faulted."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(small_spec(cache={"tiers": [{"name": "dram", "backend": "cpu",
                                                                "capacity": "16MiB"}]})))
    plan = load_plan(str(path))[1]
    tiers: list = []
    build_tiers(plan, tiers, run_id="t", client_index=0, workers=1, io_log_for=lambda name: None)
    try:
        assert tiers[0].description["prefaulted_bytes"] == 16 << 20
        assert len(tiers[0].backend._arena._free) == 4
    finally:
        for tier in tiers:
            tier.backend.close()


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


class FailingSource:
    """A source whose second piece raises: the write must publish nothing and give its blocks back."""

    size = 3 * BLOCK

    def fill(self, offset: int, out: memoryview) -> None:
        if offset:
            raise OSError("source failed")
        out[:] = bytes(len(out))


def test_the_dram_tier_on_the_kit_keeps_its_commands_its_records_and_its_host_only_split() -> None:
    """On PieceBackend (issue #30 §2) the cpu tier still moves one 4 MiB block per command, logs one record per
    block (write, read, a demotion's read_range cut at block boundaries), books everything as host time
    with device 0 (docs/tiers/memory.md, L4), and a failed write leaves no entry and no lost blocks."""
    log = CommandLog()
    backend = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="t", io_log=log))
    backend.open()
    backend.reserve(3 * BLOCK)
    pool = NoisePool(seed=1, pool_bytes=1 << 20, max_piece=BLOCK)
    size = 2 * BLOCK + 5
    wrote = backend.write("k", pool.payload("k", size))
    read = backend.read("k", size, DISCARD)
    out = bytearray(BLOCK)
    backend.read_range("k", BLOCK - 10, memoryview(out))
    assert bytes(out) == bytes(expected_bytes(pool, "k", size)[BLOCK - 10:2 * BLOCK - 10])
    assert log.seen == [("k", "write", 0, BLOCK), ("k", "write", BLOCK, BLOCK), ("k", "write", 2 * BLOCK, 5),
                        ("k", "read", 0, BLOCK), ("k", "read", BLOCK, BLOCK), ("k", "read", 2 * BLOCK, 5),
                        ("k", "read", BLOCK - 10, 10), ("k", "read", BLOCK, BLOCK - 10)]
    for timing in (wrote, read):
        assert timing.commands == 3 and timing.nbytes == size
        assert timing.device == 0.0 and timing.host == timing.total
    free = len(backend._arena._free)
    with pytest.raises(OSError, match="source failed"):
        backend.write("bad", FailingSource())
    assert "bad" not in backend._entries and len(backend._arena._free) == free + 2  # its 3 blocks back
    with pytest.raises(KeyError):
        backend.read("bad", 1, DISCARD)
