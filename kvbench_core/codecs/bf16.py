"""A BF16-aware lossless codec: split every value into an exponent plane and a sign+mantissa plane,
then entropy-code each plane with zstd.

A BF16 value is ``s eeeeeeee mmmmmmm``.  Stored as is, each byte mixes exponent
and mantissa bits, so a general-purpose coder sees near-random bytes.  KV
activations have few distinct exponents (values cluster within a few octaves
of their channel's scale), so the exponent plane compresses well, while the
sign and mantissa bits are close to uniform and are kept raw when zstd cannot
shrink them.  The transform is numpy-vectorised into per-thread scratch
arrays; nothing is allocated per chunk.

Encoded chunk: ``u32 exponent-plane length | u32 mantissa-plane length (high
bit set = stored raw) | exponent plane | mantissa plane | odd trailing byte``.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np

from kvbench_core.codecs.general import cramjam, cramjam_version, level_options, zstd_bound
from kvbench_core.contracts.codec import CODECS_EXTRA_HINT, Codec

HEADER = 8
RAW_FLAG = 1 << 31


class BF16PlanesCodec(Codec):
    """Exponent / sign+mantissa byte planes, each zstd-coded at ``level`` (lossless for any input)."""

    name = "bf16_planes"
    requires: ClassVar[dict[str, str]] = {"cramjam": CODECS_EXTRA_HINT}
    # Level 1: on KV exponent planes zstd 1 is both smaller and faster than 3 (docs/PERFORMANCE.md, Codecs).
    options_schema: ClassVar[dict[str, Any]] = level_options(-7, 22, 1, "zstd level for the two planes")

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.level = int(self.options["level"])
        self._local = threading.local()

    def _scratch(self, values: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """This thread's (exponent plane, mantissa plane, two uint16 work arrays), grown on demand."""
        held = getattr(self._local, "arrays", None)
        if held is None or held[0].shape[0] < values:
            held = (np.empty(values, np.uint8), np.empty(values, np.uint8),
                    np.empty(values, np.uint16), np.empty(values, np.uint16))
            self._local.arrays = held
        return held[0][:values], held[1][:values], held[2][:values], held[3][:values]

    def max_encoded_size(self, nbytes: int) -> int:
        half = nbytes // 2
        return HEADER + zstd_bound(half) + zstd_bound(half) + 1

    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        values = data.shape[0] // 2
        exponent, mantissa, work, bits = self._scratch(values)
        words = data[: values * 2].view("<u2")
        np.right_shift(words, 7, out=work)
        np.copyto(exponent, work, casting="unsafe")  # the low 8 bits of v >> 7: the exponent
        np.right_shift(words, 8, out=work)
        np.bitwise_and(work, 0x80, out=work)  # the sign, moved to bit 7
        np.bitwise_and(words, 0x7F, out=bits)  # the 7 mantissa bits
        np.bitwise_or(work, bits, out=work)
        np.copyto(mantissa, work, casting="unsafe")
        zstd = cramjam().zstd
        at = HEADER
        exp_len = int(zstd.compress_into(exponent, out[at:], level=self.level)) if values else 0
        at += exp_len
        man_len = int(zstd.compress_into(mantissa, out[at:], level=self.level)) if values else 0
        if man_len >= values:  # sign+mantissa bits are near random: keep them raw, decoding is a copy
            out[at:at + values] = mantissa
            man_len = values
            out[:HEADER].view("<u4")[:] = (exp_len, man_len | RAW_FLAG)
        else:
            out[:HEADER].view("<u4")[:] = (exp_len, man_len)
        at += man_len
        if data.shape[0] % 2:
            out[at] = data[-1]
            at += 1
        return at

    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        values = out.shape[0] // 2
        exponent, mantissa, work, _ = self._scratch(values)
        exp_len, man_field = (int(n) for n in data[:HEADER].view("<u4"))
        man_len = man_field & ~RAW_FLAG
        zstd = cramjam().zstd
        at = HEADER
        if values:
            zstd.decompress_into(data[at:at + exp_len], exponent)
        at += exp_len
        if man_field & RAW_FLAG:
            mantissa[:] = data[at:at + man_len]
        elif values:
            zstd.decompress_into(data[at:at + man_len], mantissa)
        at += man_len
        words = out[: values * 2].view("<u2")
        np.copyto(words, exponent)
        np.left_shift(words, 7, out=words)  # exponent back to bits 7..14
        np.copyto(work, mantissa)
        np.bitwise_and(work, 0x7F, out=work)
        np.bitwise_or(words, work, out=words)
        np.copyto(work, mantissa)
        np.bitwise_and(work, 0x80, out=work)
        np.left_shift(work, 8, out=work)  # sign back to bit 15
        np.bitwise_or(words, work, out=words)
        if out.shape[0] % 2:
            out[-1] = data[at]
        return int(out.shape[0])

    def version(self) -> str:
        return f"kvbench bf16 planes v1 + zstd ({cramjam_version()})"
