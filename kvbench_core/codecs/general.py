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

from kvbench_core.codecs.contract import CODECS_EXTRA_HINT, Codec


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
    """LZ4 blocks, one per chunk: ``level`` 0 is LZ4's fast mode, 1..12 its high-compression mode."""

    name = "lz4"
    requires: ClassVar[dict[str, str]] = {"cramjam": CODECS_EXTRA_HINT}
    options_schema: ClassVar[dict[str, Any]] = level_options(0, 12, 0, "0 = LZ4 fast; 1..12 = LZ4 HC at that level")

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.level = int(self.options["level"])

    def max_encoded_size(self, nbytes: int) -> int:
        return nbytes + nbytes // 255 + 16  # LZ4_COMPRESSBOUND

    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        if self.level == 0:
            return int(cramjam().lz4.compress_block_into(data, out, store_size=False))
        return int(cramjam().lz4.compress_block_into(data, out, mode="high_compression", compression=self.level,
                                                     store_size=False))

    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        return int(cramjam().lz4.decompress_block_into(data, out))

    def version(self) -> str:
        return cramjam_version()


def zstd_bound(nbytes: int) -> int:
    """ZSTD_COMPRESSBOUND plus a frame header's worth of margin."""
    return nbytes + (nbytes >> 8) + 128
