"""General-purpose lossless codecs: ``none`` (a copy), zstd and lz4 at a chosen level.

zstd and lz4 run through cramjam, whose ``compress_into``/``decompress_into``
write straight into the stage's reused buffers: python-zstandard and
python-lz4 only return fresh ``bytes``, which would mean one allocation (and
page faults) per chunk, so the benchmark would partly measure the allocator.
cramjam is imported on first use; a missing one names the ``codecs`` extra.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import numpy as np

from kvbench_core.contracts.codec import CODECS_EXTRA_HINT, Codec


def cramjam() -> Any:
    """The cramjam module, imported lazily (the core runs without the ``codecs`` extra)."""
    return importlib.import_module("cramjam")


def cramjam_version() -> str:
    return f"cramjam {cramjam().__version__}"


def level_options(minimum: int, maximum: int, default: int, description: str) -> dict[str, Any]:
    """The options schema of a codec whose one knob is its compression level."""
    return {"type": "object", "additionalProperties": False,
            "properties": {"level": {"type": "integer", "minimum": minimum, "maximum": maximum, "default": default,
                                     "description": description}}}


class NoneCodec(Codec):
    """Bytes stored as they are: what every tier does without a codec (the stage is then skipped)."""

    name = "none"

    def max_encoded_size(self, nbytes: int) -> int:
        return nbytes

    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        out[: data.shape[0]] = data
        return int(data.shape[0])

    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        out[: data.shape[0]] = data
        return int(data.shape[0])


class ZstdCodec(Codec):
    """Zstandard frames, one per chunk, at ``level`` (negative levels are zstd's fast modes)."""

    name = "zstd"
    requires: ClassVar[dict[str, str]] = {"cramjam": CODECS_EXTRA_HINT}
    options_schema: ClassVar[dict[str, Any]] = level_options(-7, 22, 3, "zstd level (3 is zstd's default)")

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.level = int(self.options["level"])

    def max_encoded_size(self, nbytes: int) -> int:
        return zstd_bound(nbytes)

    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        return int(cramjam().zstd.compress_into(data, out, level=self.level))

    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        return int(cramjam().zstd.decompress_into(data, out))

    def version(self) -> str:
        return cramjam_version()


class Lz4Codec(Codec):
    """LZ4, one unit per chunk, at ``level`` as the ``lz4`` library and command line mean it.

    Levels 0-2 are LZ4's fast mode (``lz4 -1`` and ``-2`` are too: the library's high-compression
    levels start at 3, ``LZ4HC_CLEVEL_MIN``): one raw LZ4 block per chunk.  Levels 3-12 are LZ4 HC
    at that level, one LZ4 frame per chunk: cramjam's block call ignores its level (its output at
    "level 9" was byte-identical to fast mode), while its frame call ``compress_into(level=)``
    honours it.  The frame's few bytes of header and checksum are nothing beside HC's cost, but the
    frame call is several times slower than the block call in fast mode, so fast mode keeps blocks.
    """

    name = "lz4"
    requires: ClassVar[dict[str, str]] = {"cramjam": CODECS_EXTRA_HINT}
    options_schema: ClassVar[dict[str, Any]] = level_options(
        0, 12, 0, "0-2 = LZ4 fast mode (as lz4 -1/-2); 3..12 = LZ4 HC at that level (as lz4 -3 ... -12)")

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.level = int(self.options["level"])
        self.high_compression = self.level >= LZ4_HC_MIN_LEVEL

    def max_encoded_size(self, nbytes: int) -> int:
        bound = nbytes + nbytes // 255 + 16  # LZ4_COMPRESSBOUND
        if self.high_compression:  # LZ4F_compressBound: header, a 4-byte size per 64 KiB block, end mark, checksum
            bound += LZ4_FRAME_OVERHEAD + 4 * (nbytes // LZ4_FRAME_BLOCK + 1)
        return bound

    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        if self.high_compression:
            return int(cramjam().lz4.compress_into(data, out, level=self.level))
        return int(cramjam().lz4.compress_block_into(data, out, store_size=False))

    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        if self.high_compression:
            return int(cramjam().lz4.decompress_into(data, out))
        return int(cramjam().lz4.decompress_block_into(data, out))

    def version(self) -> str:
        return cramjam_version()


LZ4_HC_MIN_LEVEL = 3  # LZ4HC_CLEVEL_MIN: below it the lz4 library compresses in fast mode
LZ4_FRAME_BLOCK = 64 << 10  # the frame format's default (smallest) block size
LZ4_FRAME_OVERHEAD = 64  # frame header (<= 19 B), end mark (4 B), content checksum (4 B), with margin


def zstd_bound(nbytes: int) -> int:
    """ZSTD_COMPRESSBOUND plus a frame header's worth of margin."""
    return nbytes + (nbytes >> 8) + 128
