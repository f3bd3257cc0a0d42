"""Payload kinds: ``synthetic_kv`` is BF16 data from the documented activation-like model (finite,
channel-structured, heavy-tailed, deterministic, non-dedupable); the stamp is incompressible in both kinds."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from kvbench_core.contracts.payload import (
    BLOCK,
    HEAD_DIM,
    STAMP_BYTES,
    NoisePool,
    mix64,
    round_to_bf16,
    stamp_words,
)

KV = NoisePool(seed=3, pool_bytes=4 << 20, max_piece=1 << 20, kind="synthetic_kv")


def as_float(raw: np.ndarray) -> np.ndarray:
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


def entry(pool: NoisePool, key: str, size: int) -> np.ndarray:
    out = np.empty(size, dtype=np.uint8)
    pool.payload(key, size).fill(0, memoryview(out))
    return out


def test_synthetic_kv_is_finite_bf16_with_per_channel_scales_and_outlier_channels() -> None:
    values = as_float(KV.data[: 4 << 20]).reshape(-1, HEAD_DIM)
    assert np.isfinite(values).all()
    channel_rms = np.sqrt((values.astype(np.float64) ** 2).mean(axis=0))
    assert channel_rms.max() / np.median(channel_rms) > 8  # outlier channels stand out
    # Heavy tails: far more mass beyond 4 sigma (per channel) than a Gaussian's 0.006 %.
    z = values / channel_rms
    assert (np.abs(z) > 4).mean() > 0.001


def test_bf16_rounding_is_to_nearest_with_ties_to_even() -> None:
    ulp = 2.0 ** -7  # BF16 spacing just above 1.0
    values = np.array([1.0, 1.0 + ulp / 2, 1.0 + 3 * ulp / 2, 1.0 + ulp * 0.75, -2.5, 1.0 + ulp / 4],
                      dtype=np.float32)
    out = np.empty(values.shape[0], dtype=np.uint16)
    round_to_bf16(values.copy(), out)
    back = (out.astype(np.uint32) << 16).view(np.float32)
    assert back.tolist() == [1.0, 1.0, 1.0 + 2 * ulp, 1.0 + ulp, -2.5, 1.0]


def test_the_kind_and_the_seed_decide_the_bytes() -> None:
    same = NoisePool(seed=3, pool_bytes=4 << 20, max_piece=1 << 20, kind="synthetic_kv")
    assert np.array_equal(entry(KV, "k", 300_000), entry(same, "k", 300_000))
    other = NoisePool(seed=4, pool_bytes=4 << 20, max_piece=1 << 20, kind="synthetic_kv")
    assert not np.array_equal(entry(KV, "k", 300_000), entry(other, "k", 300_000))
    with pytest.raises(ValueError, match="unknown payload kind 'zeros'"):
        NoisePool(seed=1, pool_bytes=1 << 20, max_piece=1 << 20, kind="zeros")


def test_synthetic_kv_has_no_two_equal_4k_blocks_across_entries() -> None:
    blocks = set()
    for key in ("a", "b", "c", "d"):
        data = entry(KV, key, 1 << 20)
        blocks.update(data[i:i + 4096].tobytes() for i in range(0, data.shape[0], 4096))
    assert len(blocks) == 4 * (1 << 20) // 4096


def test_synthetic_kv_compresses_but_random_does_not_even_its_stamps() -> None:
    random = NoisePool(seed=3, pool_bytes=4 << 20, max_piece=1 << 20)
    kv = entry(KV, "x", 1 << 20)
    noise = entry(random, "x", 1 << 20)
    assert len(zlib.compress(kv, 6)) < 0.9 * kv.shape[0]
    assert len(zlib.compress(noise, 9)) >= noise.shape[0]
    stamps = noise.reshape(-1, BLOCK)[:, :STAMP_BYTES].copy()
    assert len(zlib.compress(stamps.tobytes(), 9)) >= stamps.size  # a counter stamp compressed to ~60 %


def test_the_stamp_is_a_bijection_of_entry_and_block() -> None:
    seen = {stamp_words(entry_id, block) for entry_id in range(64) for block in range(64)}
    assert len(seen) == 64 * 64
    assert len({mix64(v) for v in range(100_000)}) == 100_000
    noise = entry(NoisePool(seed=3, pool_bytes=1 << 20, max_piece=1 << 20), "s", 2 * BLOCK)
    from kvbench_core.contracts.payload import entry_id_for

    words = noise.reshape(2, BLOCK)[:, :STAMP_BYTES].view("<u8")
    assert [tuple(map(int, w)) for w in words] == [stamp_words(entry_id_for("s"), b) for b in (0, 1)]
