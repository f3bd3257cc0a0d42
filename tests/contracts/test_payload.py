"""Payload bytes: deterministic under the seed, the same however an entry is cut into pieces, unique in
every 512 B block (nothing to deduplicate), incompressible, and checkable by the verify sink."""

from __future__ import annotations

import hashlib
import zlib

import numpy as np
import pytest

from kvbench_core.contracts.payload import BLOCK, ChecksumSink, NoisePool, VerifySink, entry_id_for

POOL = NoisePool(seed=9, pool_bytes=1 << 20, max_piece=1 << 20)


def render(pool: NoisePool, key: str, size: int, piece: int | None = None, start: int = 0) -> np.ndarray:
    """The entry's bytes ``[start, start + size)`` produced ``piece`` bytes at a time."""
    out = np.empty(size, dtype=np.uint8)
    payload = pool.payload(key, start + size)
    step = piece or size
    for offset in range(0, size, step):
        n = min(step, size - offset)
        payload.fill(start + offset, memoryview(out[offset:offset + n]))
    return out


def test_entry_ids_are_stable_across_processes() -> None:
    # blake2b of the key, not hash(): the same on every run and every client.
    assert entry_id_for("u0_c1_turn_1") == int.from_bytes(
        hashlib.blake2b(b"u0_c1_turn_1", digest_size=8).digest(), "little") >> 1
    assert entry_id_for("a") != entry_id_for("b")


def test_the_same_seed_and_key_give_the_same_bytes() -> None:
    again = NoisePool(seed=9, pool_bytes=1 << 20, max_piece=1 << 20)
    assert np.array_equal(render(POOL, "k", 100_000), render(again, "k", 100_000))
    assert not np.array_equal(render(POOL, "k", 100_000), render(POOL, "other", 100_000))
    other_seed = NoisePool(seed=10, pool_bytes=1 << 20, max_piece=1 << 20)
    assert not np.array_equal(render(POOL, "k", 100_000), render(other_seed, "k", 100_000))


@pytest.mark.parametrize("piece", [1, 7, 100, 511, 512, 513, 1000, 4096, 65_536])
def test_bytes_do_not_depend_on_how_the_entry_is_cut(piece: int) -> None:
    whole = render(POOL, "k", 20_000)
    assert np.array_equal(render(POOL, "k", 20_000, piece), whole)


@pytest.mark.parametrize("start", [1, 4, 15, 16, 17, 511, 512, 520, 3 * 512 + 8])
def test_a_range_read_from_any_offset_matches(start: int) -> None:
    whole = render(POOL, "k", 8192)
    assert np.array_equal(render(POOL, "k", 8192 - start, start=start), whole[start:])
    assert np.array_equal(render(POOL, "k", 5, start=start), whole[start:start + 5])


def test_every_512_byte_block_is_unique_across_entries() -> None:
    blocks: set[bytes] = set()
    count = 0
    for key in ("a", "b", "c", "d"):
        data = render(POOL, key, 3 << 20, 1 << 20)  # longer than the pool: the noise repeats, the stamps do not
        for i in range(0, data.shape[0], BLOCK):
            blocks.add(data[i:i + BLOCK].tobytes())
            count += 1
    assert len(blocks) == count


def test_payload_is_incompressible() -> None:
    data = render(POOL, "k", 1 << 20).tobytes()
    assert len(zlib.compress(data, 6)) > 0.97 * len(data)  # only the 16 B stamps (3%) have any structure


def test_a_piece_larger_than_the_pool_allows_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds the pool's max piece"):
        POOL.render(1, 0, np.empty(POOL.max_piece + 1, dtype=np.uint8))


def test_the_verify_sink_accepts_the_payload_and_finds_a_flipped_byte() -> None:
    data = render(POOL, "k", 10_000)
    sink = VerifySink(POOL, "k", np.empty(4096, dtype=np.uint8))
    for offset in range(0, 10_000, 4096):
        sink.consume(offset, memoryview(data[offset:offset + 4096]))
    assert (sink.mismatches, sink.first_bad_offset) == (0, None)
    data[5000] ^= 1
    sink = VerifySink(POOL, "k", np.empty(4096, dtype=np.uint8))
    for offset in range(0, 10_000, 4096):
        sink.consume(offset, memoryview(data[offset:offset + 4096]))
    assert (sink.mismatches, sink.first_bad_offset) == (1, 4096)
    wrong_entry = VerifySink(POOL, "other", np.empty(4096, dtype=np.uint8))
    wrong_entry.consume(0, memoryview(data[:4096]))
    assert wrong_entry.mismatches == 1


def test_the_checksum_sink_does_not_depend_on_piece_order() -> None:
    data = render(POOL, "k", 10_000)
    pieces = [(offset, data[offset:offset + 1000]) for offset in range(0, 10_000, 1000)]
    forward, backward = ChecksumSink(), ChecksumSink()
    for offset, piece in pieces:
        forward.consume(offset, memoryview(piece))
    for offset, piece in reversed(pieces):
        backward.consume(offset, memoryview(piece))
    assert (forward.digest, forward.nbytes) == (backward.digest, backward.nbytes) == (forward.digest, 10_000)
    swapped = ChecksumSink()
    for (offset, _), (_, piece) in zip(pieces, reversed(pieces), strict=True):
        swapped.consume(offset, memoryview(piece))
    assert swapped.digest != forward.digest  # the same bytes at the wrong offsets do not pass


def test_every_block_carries_its_stamp_words_on_both_sides_of_the_precomputed_range() -> None:
    """The stamps of an entry's first MIXED_BLOCKS_BYTES come from a table computed once, later ones are
    mixed per piece: a piece across that boundary carries stamp_words(entry, block) in every block."""
    from kvbench_core.contracts.payload import MIXED_BLOCKS_BYTES, STAMP_BYTES, stamp_words

    start = MIXED_BLOCKS_BYTES - 8 * BLOCK - 100
    got = render(POOL, "boundary", 20 * BLOCK, start=start)
    entry_id = entry_id_for("boundary")
    first = -(-start // BLOCK)
    for block in range(first, first + 18):
        at = block * BLOCK - start
        words = got[at:at + STAMP_BYTES].view("<u8")
        assert (int(words[0]), int(words[1])) == stamp_words(entry_id, block)
