"""What a codec does to a kvio projection: fewer device bytes per object, plus decode time per load.

``kvbench project`` has no codec to run, so it takes one codec's figures: declared
(``--codec-ratio``, ``--codec-decode-bytes-per-sec``) or measured by a kvbench
run (``--codec-from RESULT``: one tier's ``codec`` section).  Loading an object
of ``L`` logical bytes then moves ``L / ratio`` bytes from the device and
decodes ``L`` bytes after the read (decode is blocking) on ``n`` cores at a
per-core rate ``D`` (``n`` = 1 in kvbench's own stage; an engine may split an
object's independent chunks over more), so it beats recomputing its tokens in
``t`` seconds when

    L / (ratio * B) + L / (n * D) < t   <=>   B > L / (ratio * (t - L / (n * D)))

and never when decoding alone (``L / (n * D)``) takes ``t`` or longer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kvbench_core.contracts.errors import SpecError


@dataclass(frozen=True)
class CodecProjection:
    """One codec's figures as a projection uses them (rates are per core, in logical bytes per second)."""

    ratio: float
    decode_bytes_per_s: float | None = None
    encode_bytes_per_s: float | None = None
    name: str = "declared"
    source: str = "declared"
    #: Cores decoding one object's chunks in parallel (chunks are independent; kvbench's stage uses one).
    decode_cores: int = 1

    def __post_init__(self) -> None:
        if not self.ratio > 0:
            raise SpecError(f"--codec-ratio: expected a ratio > 0, got {self.ratio}")
        for flag, rate in (("--codec-decode-bytes-per-sec", self.decode_bytes_per_s),
                           ("--codec-encode-bytes-per-sec", self.encode_bytes_per_s)):
            if rate is not None and not rate > 0:
                raise SpecError(f"{flag}: expected a rate > 0, got {rate}")
        if self.decode_cores < 1:
            raise SpecError(f"--codec-decode-cores: expected at least 1, got {self.decode_cores}")

    def encoded_bytes(self, logical: int) -> int:
        """What reaches the device for ``logical`` bytes."""
        return math.ceil(logical / self.ratio)

    def decode_s(self, logical: int) -> float:
        return logical / (self.decode_bytes_per_s * self.decode_cores) if self.decode_bytes_per_s else 0.0

    def breakeven_bytes_per_s(self, logical: int, recompute_s: float) -> float | None:
        """Device bandwidth above which loading (read + decode) beats recomputing; None: never."""
        budget = recompute_s - self.decode_s(logical)
        return self.encoded_bytes(logical) / budget if budget > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def projection_from_result(result: dict[str, Any], tier: str | None, *, path: str,
                           decode_cores: int = 1) -> CodecProjection:
    """The codec figures one tier of a kvbench result measured (the first coded tier when ``tier`` is None)."""
    tiers = (result.get("metrics") or {}).get("tiers") or {}
    coded = {name: info["codec"] for name, info in tiers.items()
             if (info.get("codec") or {}).get("name", "none") != "none"}
    if tier is not None and tier not in tiers:
        raise SpecError(f"--codec-tier: {path} has no tier {tier!r}; it has {', '.join(tiers) or 'none'}")
    if tier is not None and tier not in coded:
        raise SpecError(f"--codec-tier: tier {tier!r} of {path} ran without a codec")
    if not coded:
        raise SpecError(f"--codec-from: {path} ran no tier through a codec (cache.codec)")
    name = tier or next(iter(coded))
    codec = coded[name]
    if not codec.get("ratio"):
        raise SpecError(f"--codec-from: tier {name!r} of {path} moved no bytes, so it measured no ratio")
    return CodecProjection(ratio=codec["ratio"], decode_bytes_per_s=codec.get("decode_bytes_per_s_per_core"),
                           encode_bytes_per_s=codec.get("encode_bytes_per_s_per_core"), name=codec["name"],
                           source=f"{path} (tier {name})", decode_cores=decode_cores)
