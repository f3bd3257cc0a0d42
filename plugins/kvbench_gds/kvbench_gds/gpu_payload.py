"""GPU-origin payloads: the run's noise pool mirrored in GPU memory, stamped with torch ops.

In a real engine KV tensors are born in GPU memory; with ``payload_origin: gpu``
the gds tier renders an entry's bytes on the GPU instead of filling a host
buffer and copying it over, so the write path is GPU → cuFile → NVMe with no
host bytes at all (the seed's "GPU-native mode").  The bytes are exactly those
``kvbench_core.contracts.payload.NoisePool.render`` produces for the same entry and
offset, so a verified read compares them with the host-side generator and
dedup-resistance is unchanged: one copy of the pool's bytes plus a strided
``(entry_id, block_index)`` stamp every 512 bytes, mixed with splitmix64's
finaliser as the host does (torch has no unsigned 64-bit shifts, so the
logical shift is an arithmetic one masked to its low bits; int64 adds and
multiplies wrap modulo 2**64 like uint64 ones).
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.payload import BLOCK, MIX_1, MIX_2, MIX_ADD, NoisePool, stamp_words

_STAMP_BYTES = 16  # two little-endian 64-bit words


def _signed(value: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _xor_shift_right(values: Any, shift: int, scratch: Any) -> None:
    """``values ^= values >> shift`` with a logical (unsigned) shift, in place."""
    import torch

    torch.bitwise_right_shift(values, shift, out=scratch)
    scratch.bitwise_and_((1 << (64 - shift)) - 1)
    values.bitwise_xor_(scratch)


def mix64_tensor(values: Any, scratch: Any) -> None:
    """``kvbench_core.contracts.payload.mix64`` on an int64 tensor in place (same bits as the uint64 result)."""
    values.add_(_signed(MIX_ADD))
    for shift, multiplier in ((30, MIX_1), (27, MIX_2)):
        _xor_shift_right(values, shift, scratch)
        values.mul_(_signed(multiplier))
    _xor_shift_right(values, 31, scratch)


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
        within = offset % BLOCK
        if 0 < within < _STAMP_BYTES:  # the piece starts inside the previous block's stamp
            k = min(_STAMP_BYTES - within, n)
            out[:k].copy_(self._stamp_bytes(entry_id, offset // BLOCK)[within:within + k])
        usable = n - skip
        if usable <= 0:
            return
        full = usable // BLOCK
        if full:
            stamps = torch.empty((full, 2), dtype=torch.int64, device=out.device)
            scratch = torch.empty(full, dtype=torch.int64, device=out.device)
            mixed_block = stamps[:, 1]
            torch.add(self._block_index[:full], first_block, out=mixed_block)
            mix64_tensor(mixed_block, scratch)
            torch.bitwise_xor(mixed_block, entry_id, out=stamps[:, 0])
            mix64_tensor(stamps[:, 0], scratch)
            heads = out[skip:skip + full * BLOCK].view(full, BLOCK)[:, :_STAMP_BYTES]
            heads.copy_(stamps.view(torch.uint8))
        tail = usable - full * BLOCK
        if tail:
            at, k = skip + full * BLOCK, min(tail, _STAMP_BYTES)
            out[at:at + k].copy_(self._stamp_bytes(entry_id, first_block + full)[:k])

    def _stamp_bytes(self, entry_id: int, block: int) -> Any:
        """One block's 16 stamp bytes (a piece edge cut it: too few to be worth a kernel)."""
        words = [_signed(word) for word in stamp_words(entry_id, block)]
        return self._torch.tensor(words, dtype=self._torch.int64).view(self._torch.uint8)
