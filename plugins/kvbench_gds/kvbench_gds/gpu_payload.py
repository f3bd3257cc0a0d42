"""GPU-origin payloads: the run's noise pool mirrored in GPU memory, stamped with torch ops.

In a real engine KV tensors are born in GPU memory; with ``payload_origin: gpu``
the gds tier renders an entry's bytes on the GPU instead of filling a host
buffer and copying it over, so the write path is GPU → cuFile → NVMe with no
host bytes at all (the seed's "GPU-native mode").  The bytes are exactly those
``kvbench_core.engine.payload.NoisePool.render`` produces for the same entry and
offset, so a verified read compares them with the host-side generator and
dedup-resistance is unchanged: one copy of the pool's bytes plus a strided
``(entry_id, block_index)`` stamp every 512 bytes.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.engine.payload import BLOCK, NoisePool

_STAMP_BYTES = 16  # two little-endian 64-bit words


class DeviceNoise:
    """A device copy of one ``NoisePool`` (pool plus ``max_piece`` wrap-around tail).

    Costs ``pool_bytes + max_piece`` bytes of GPU memory once per run.
    """

    def __init__(self, pool: NoisePool, device: Any, max_piece: int) -> None:
        import torch

        self._torch = torch
        self.pool = pool
        self.pool_bytes = pool.pool_bytes
        self.max_piece = min(max_piece, pool.max_piece)
        self.data = torch.from_numpy(pool.data[: pool.pool_bytes + self.max_piece]).to(device)
        self._block_index = torch.arange(self.max_piece // BLOCK + 1, dtype=torch.int64, device=device)
        if self.data.is_cuda:  # made on the default stream; renders run on per-thread streams
            torch.cuda.synchronize(self.data.device)

    def render(self, entry_id: int, offset: int, out: Any) -> None:
        """Write the entry's bytes ``[offset, offset + len(out))`` into the uint8 tensor ``out``."""
        for start in range(0, out.shape[0], self.max_piece):
            self._render_piece(entry_id, offset + start, out[start:start + self.max_piece])

    def _render_piece(self, entry_id: int, offset: int, out: Any) -> None:
        torch = self._torch
        n = out.shape[0]
        start = (entry_id * BLOCK * 7919 + offset) % self.pool_bytes  # NoisePool.render's shift
        out.copy_(self.data[start:start + n])
        first_block = -(-offset // BLOCK)
        skip = first_block * BLOCK - offset
        usable = n - skip
        if usable <= 0:
            return
        full = usable // BLOCK
        if full:
            stamps = torch.empty((full, 2), dtype=torch.int64, device=out.device)
            stamps[:, 0] = entry_id
            torch.add(self._block_index[:full], first_block, out=stamps[:, 1])
            heads = out[skip:skip + full * BLOCK].view(full, BLOCK)[:, :_STAMP_BYTES]
            heads.copy_(stamps.view(torch.uint8))
        tail = usable - full * BLOCK
        if tail:
            stamp = torch.tensor([entry_id, first_block + full], dtype=torch.int64).view(torch.uint8)
            at, k = skip + full * BLOCK, min(tail, _STAMP_BYTES)
            out[at:at + k].copy_(stamp[:k])
