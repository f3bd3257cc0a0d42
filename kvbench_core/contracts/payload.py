"""Deterministic, non-dedupable payload bytes without per-operation allocation.

One seeded noise pool is generated at start-up.  The bytes of an entry at
offset ``o`` are the pool's bytes at ``(shift(entry) + o) mod POOL``, and the
first 16 bytes of every 512-byte block are overwritten with a stamp: two
uint64 words ``(mix(entry_id ^ mix(block_index)), mix(block_index))``, where
``mix`` is splitmix64's finaliser, a bijection, so the pair is unique for every
``(entry_id, block_index)``.  The stamp makes every 512 B (hence every 4 KiB)
block unique across the whole run, so deduplicating storage finds nothing;
being mixed, the stamp is as incompressible as the noise around it (a plain
counter stamp gave a byte-plane codec 2.4 % to find in "incompressible" data).  Filling a piece is one memcpy
plus a strided stamp into the caller's reused buffer.  The same function
regenerates the expected bytes for ``verify``.

The format is part of the plugin contract (``kvbench_core.contracts``): a tier that fills or checks payloads
itself, on a GPU say, renders exactly these bytes, and the conformance suite writes them.

What the pool holds is the run's declared payload kind (``payload:`` in the
spec).  ``random`` (the default, as MLPerf requires) is incompressible noise.
``synthetic_kv`` is BF16 values drawn from an activation-like model (below and
in docs/codecs.md), so that a codec's ratio means something; the stamp is
kept, so synthetic KV is no more dedupable than real KV is.
"""

from __future__ import annotations

import hashlib
import threading
import zlib

import numpy as np

PAYLOAD_KINDS = ("random", "synthetic_kv")
POOL_BYTES = 64 << 20
BLOCK = 512
STAMP_BYTES = 16  # two little-endian uint64 at the start of each block, see the module docstring
STAMP_DTYPE = np.dtype("V16")  # one stamp as raw bytes: a whole stamp is one strided 16-byte store
MIXED_BLOCKS_BYTES = 64 << 20  # the stamp's mix64(block) is precomputed for an entry's first 64 MiB
#: splitmix64's finaliser constants: public because a tier that renders payloads on its own device (the
#: gds tier's GPU payload) must produce the same bits.
MIX_ADD, MIX_1, MIX_2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1


def mix64(value: int) -> int:
    """splitmix64's finaliser on one integer: a bijection of 64-bit values that looks random."""
    z = (value + MIX_ADD) & _MASK64
    z = ((z ^ (z >> 30)) * MIX_1) & _MASK64
    z = ((z ^ (z >> 27)) * MIX_2) & _MASK64
    return z ^ (z >> 31)


def mix64_array(values: np.ndarray, scratch: np.ndarray) -> None:
    """``mix64`` on a uint64 array in place (``scratch`` is as long), with no temporary arrays."""
    with np.errstate(over="ignore"):
        np.add(values, np.uint64(MIX_ADD), out=values)
        for shift, multiplier in ((30, MIX_1), (27, MIX_2)):
            np.right_shift(values, np.uint64(shift), out=scratch)
            np.bitwise_xor(values, scratch, out=values)
            np.multiply(values, np.uint64(multiplier), out=values)
        np.right_shift(values, np.uint64(31), out=scratch)
        np.bitwise_xor(values, scratch, out=values)


def stamp_words(entry_id: int, block: int) -> tuple[int, int]:
    """The two stamp words of one block (the vectorised path in ``NoisePool`` computes the same)."""
    mixed_block = mix64(block)
    return mix64(entry_id ^ mixed_block), mixed_block


def entry_id_for(key: str) -> int:
    """Stable 63-bit id of a key (independent of PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1


class NoisePool:
    """The seeded random bytes every payload is cut from; shared read-only by all threads."""

    def __init__(self, seed: int, pool_bytes: int = POOL_BYTES, max_piece: int = 64 << 20,
                 kind: str = "random") -> None:
        if kind not in PAYLOAD_KINDS:
            raise ValueError(f"unknown payload kind {kind!r}; expected one of {', '.join(PAYLOAD_KINDS)}")
        rng = np.random.default_rng(seed)
        self.kind = kind
        self.pool_bytes = pool_bytes
        self.max_piece = max_piece
        # The tail repeats the head so any piece up to max_piece is one contiguous slice.
        data = np.empty(pool_bytes + max_piece, dtype=np.uint8)
        if kind == "synthetic_kv":
            synthetic_kv_bf16(rng, data[:pool_bytes])
        else:
            data[:pool_bytes] = np.frombuffer(rng.bytes(pool_bytes), dtype=np.uint8)  # ~10x faster than integers()
        head = min(max_piece, pool_bytes)
        data[pool_bytes:pool_bytes + head] = data[:head]
        for start in range(pool_bytes + head, pool_bytes + max_piece, pool_bytes):
            end = min(start + pool_bytes, pool_bytes + max_piece)
            data[start:end] = data[: end - start]
        self.data = data
        self._block_index = np.arange(max_piece // BLOCK + 1, dtype=np.uint64)
        # mix64 of every block index of an entry's first MIXED_BLOCKS_BYTES, computed once: the stamp's
        # second word, and the input of its first, without 8 numpy passes per piece
        self._mixed_blocks = np.arange(MIXED_BLOCKS_BYTES // BLOCK, dtype=np.uint64)
        mix64_array(self._mixed_blocks, np.empty_like(self._mixed_blocks))
        self._scratch = threading.local()  # per thread: the stamp computation's word arrays

    def payload(self, key: str, size: int) -> EntryPayload:
        return EntryPayload(self, key, size)

    def render(self, entry_id: int, offset: int, out: np.ndarray) -> None:
        """Write the entry's bytes at ``offset`` into the uint8 array ``out`` (len <= max_piece): one copy
        out of the pool, then each whole block's 16-byte stamp as one strided store (the stamps computed
        first into this thread's arrays).  Copying and stamping in cache-sized chunks was measured no
        faster (docs/PERFORMANCE.md)."""
        n = out.shape[0]
        if n > self.max_piece:
            raise ValueError(f"piece of {n} bytes exceeds the pool's max piece {self.max_piece}")
        start = (entry_id * BLOCK * 7919 + offset) % self.pool_bytes
        np.copyto(out, self.data[start:start + n])
        first_block = -(-offset // BLOCK)  # first block boundary at or after offset
        lead = min(first_block * BLOCK - offset, n)  # bytes before that boundary (end of the previous block)
        within = offset % BLOCK
        if lead > 0 and within < STAMP_BYTES:  # the piece starts inside the previous block's stamp
            self._partial_stamp(entry_id, offset // BLOCK, within, out[: min(lead, STAMP_BYTES - within)])
        full = (n - lead) // BLOCK
        if full:
            blocks = out[lead:lead + full * BLOCK].view(STAMP_DTYPE).reshape(full, BLOCK // STAMP_BYTES)
            blocks[:, 0] = self._full_stamps(entry_id, first_block, full)
        tail_at = lead + full * BLOCK
        if tail_at < n:
            self._partial_stamp(entry_id, first_block + full, 0, out[tail_at:tail_at + STAMP_BYTES])

    def _full_stamps(self, entry_id: int, first_block: int, count: int) -> np.ndarray:
        """The 16-byte stamps of blocks ``first_block ..`` (``count`` of them), as one ``STAMP_DTYPE`` array
        (this thread's, reused): word 1 ``mix64(block)`` from the precomputed table where it reaches,
        word 0 ``mix64(entry_id ^ word 1)``."""
        pairs, mixed, scratch = self._stamp_arrays(count)
        table = self._mixed_blocks
        if first_block + count <= table.shape[0]:
            np.copyto(mixed, table[first_block:first_block + count])
        else:
            np.add(self._block_index[:count], np.uint64(first_block), out=mixed)
            mix64_array(mixed, scratch)
        pairs[:, 1] = mixed
        np.bitwise_xor(mixed, np.uint64(entry_id), out=mixed)
        mix64_array(mixed, scratch)
        pairs[:, 0] = mixed
        return pairs.view(STAMP_DTYPE).reshape(count)

    def _stamp_arrays(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This thread's stamp pairs and two uint64 work arrays for ``count`` stamps (sized once, for the
        largest piece)."""
        arrays = getattr(self._scratch, "arrays", None)
        if arrays is None:
            size = self._block_index.shape[0]
            arrays = (np.empty((size, 2), dtype="<u8"), np.empty(size, dtype=np.uint64),
                      np.empty(size, dtype=np.uint64))
            self._scratch.arrays = arrays
        return arrays[0][:count], arrays[1][:count], arrays[2][:count]

    @staticmethod
    def _partial_stamp(entry_id: int, block: int, start: int, out: np.ndarray) -> None:
        """Stamp bytes ``[start, start + len(out))`` of block ``block`` (a piece edge cuts the stamp)."""
        stamp = np.array(stamp_words(entry_id, block), dtype="<u8").view(np.uint8)
        out[:] = stamp[start:start + out.shape[0]]


#: The synthetic-KV model: per-channel scales over a head dimension of 128, a few outlier channels.
HEAD_DIM = 128
OUTLIER_CHANNEL_SHARE = 1 / 32  # KIVI/KVQuant: a few key channels carry most of the magnitude
OUTLIER_GAIN = 16.0
STUDENT_T_DOF = 4.0  # heavier tails than a Gaussian, as measured activations have
_MODEL_BLOCK_VALUES = 1 << 20  # values generated per step, so the float32 scratch stays at 4 MiB


def synthetic_kv_bf16(rng: np.random.Generator, out: np.ndarray) -> None:
    """Fill the uint8 array ``out`` with little-endian BF16 values from an activation-like model.

    Values are laid out token-major over ``HEAD_DIM`` channels, as a KV block of
    one head is.  Channel c has a log-normal scale (sigma 0.5); one channel in
    32 is an outlier channel ``OUTLIER_GAIN`` times larger; every token has its
    own log-normal gain (sigma 0.25); the value is that scale times a Student-t
    (4 degrees of freedom) draw, rounded to BF16 (round to nearest even).
    """
    values = out.shape[0] // 2
    channel_scale = rng.lognormal(0.0, 0.5, HEAD_DIM).astype(np.float32)
    outliers = rng.random(HEAD_DIM) < OUTLIER_CHANNEL_SHARE
    channel_scale[outliers] *= OUTLIER_GAIN
    words = out[: values * 2].view("<u2")
    step = _MODEL_BLOCK_VALUES - _MODEL_BLOCK_VALUES % HEAD_DIM
    for start in range(0, values, step):
        n = min(step, values - start)
        tokens = -(-n // HEAD_DIM)
        draw = rng.standard_t(STUDENT_T_DOF, (tokens, HEAD_DIM)).astype(np.float32)
        draw *= channel_scale
        draw *= rng.lognormal(0.0, 0.25, (tokens, 1)).astype(np.float32)
        round_to_bf16(draw.reshape(-1)[:n], words[start:start + n])
    if out.shape[0] % 2:
        out[-1] = 0


def round_to_bf16(values: np.ndarray, out: np.ndarray) -> None:
    """Round float32 ``values`` (overwritten) to BF16 bit patterns in the uint16 array ``out``:
    round to nearest, ties to even, as torch's ``.to(torch.bfloat16)`` does (finite values)."""
    bits = values.view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    np.right_shift(bits, np.uint32(16), out=out, casting="unsafe")


class EntryPayload:
    """``ByteSource`` for one entry's generated bytes."""

    __slots__ = ("entry_id", "key", "pool", "size")

    def __init__(self, pool: NoisePool, key: str, size: int) -> None:
        self.pool, self.key, self.size = pool, key, size
        self.entry_id = entry_id_for(key)

    def fill(self, offset: int, out: memoryview) -> None:
        self.pool.render(self.entry_id, offset, np.frombuffer(out, dtype=np.uint8))


class ChecksumSink:
    """``ByteSink`` that folds the bytes it sees into a digest; order-independent via per-piece keys.

    Pieces may arrive out of order (parallel reads), so per-piece values are
    combined with XOR.  Each value is a hash of ``(offset, crc32(piece))``:
    CRC is linear, so XOR-ing ``crc32(offset || piece)`` directly cancels the
    pairing out and a piece returned at the wrong offset went unnoticed.
    """

    __slots__ = ("digest", "nbytes")

    def __init__(self) -> None:
        self.digest = 0
        self.nbytes = 0

    def consume(self, offset: int, data: memoryview) -> None:
        key = offset.to_bytes(8, "little") + zlib.crc32(data).to_bytes(4, "little") + len(data).to_bytes(8, "little")
        self.digest ^= int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
        self.nbytes += len(data)


class VerifySink:
    """``ByteSink`` that compares what a read returned with what the payload must contain."""

    __slots__ = ("_scratch", "entry_id", "first_bad_offset", "mismatches", "pool")

    def __init__(self, pool: NoisePool, key: str, scratch: np.ndarray) -> None:
        self.pool = pool
        self.entry_id = entry_id_for(key)
        self._scratch = scratch  # reused per worker; as large as the biggest piece
        self.mismatches = 0
        self.first_bad_offset: int | None = None

    def consume(self, offset: int, data: memoryview) -> None:
        got = np.frombuffer(data, dtype=np.uint8)
        expected = self._scratch[: got.shape[0]]
        self.pool.render(self.entry_id, offset, expected)
        if not np.array_equal(got, expected):
            self.mismatches += 1
            if self.first_bad_offset is None:
                self.first_bad_offset = offset
