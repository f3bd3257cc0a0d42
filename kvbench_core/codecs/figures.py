"""What a result says about a tier's codec: logical vs physical bytes, ratio, coding throughput per core,
and the declaration's tensor fields.  Pure functions of a tier's result section, so a merged multi-client
result computes them exactly as a single run does (docs/metrics.md, "Codec figures")."""

from __future__ import annotations

from typing import Any

NO_CODEC = {"name": "none", "version": None, "lossless": True, "options": {}}


def tier_codec(tier: dict[str, Any]) -> dict[str, Any]:
    """A tier result's ``codec`` section from its ``describe``, ``read`` and ``write`` sections."""
    codec = (tier.get("describe") or {}).get("codec") or NO_CODEC
    read, write = tier["read"], tier["write"]
    figures: dict[str, Any] = {key: codec.get(key) for key in ("name", "version", "lossless", "options")}
    for op, stats in (("written", write), ("read", read)):
        figures[f"logical_bytes_{op}"] = stats["bytes"]
        figures[f"physical_bytes_{op}"] = stats.get("physical_bytes", stats["bytes"])
    figures["ratio"] = compression_ratio(write) or compression_ratio(read)
    figures["encode_bytes_per_s_per_core"] = coding_rate(write)
    figures["decode_bytes_per_s_per_core"] = coding_rate(read)
    return figures


def compression_ratio(stats: dict[str, Any]) -> float | None:
    """Logical over physical bytes of one operation kind; None when it moved nothing."""
    physical = stats.get("physical_bytes", stats["bytes"])
    return round(stats["bytes"] / physical, 4) if physical else None


def coding_rate(stats: dict[str, Any]) -> float | None:
    """Logical bytes coded per second of codec time.  One operation codes on one thread, so this is the
    rate of one core (while it holds the GIL-free codec call); None when nothing was coded."""
    seconds = ((stats.get("histograms") or {}).get("codec") or {}).get("total", 0.0)
    return stats.get("codec_bytes", 0) / seconds if seconds > 0 else None


def tensor_declaration(tiers: dict[str, dict[str, Any]], kv_dtype: str | None) -> dict[str, Any]:
    """The declaration's tensor fields as detected from the tiers' codec sections (``none`` without one).
    The ratio is over every coded tier's writes: the KV bytes they took over the bytes their devices got."""
    coded = {name: tier["codec"] for name, tier in tiers.items() if tier["codec"]["name"] != "none"}
    if not coded:
        return {"kv_dtype": kv_dtype, "codec": "none", "lossless": True}
    logical = sum(codec["logical_bytes_written"] for codec in coded.values())
    physical = sum(codec["physical_bytes_written"] for codec in coded.values())
    return {
        "kv_dtype": kv_dtype,
        "codec": ", ".join(sorted({codec["name"] for codec in coded.values()})),
        "codec_version": ", ".join(sorted({str(codec["version"]) for codec in coded.values()})),
        "lossless": all(codec["lossless"] for codec in coded.values()),
        "compression_ratio": round(logical / physical, 4) if physical else None,
        "integration_point": f"CPU, kvbench codec stage in front of {', '.join(coded)}",
        "overlapped": False,  # a segment is decoded after its device read completes
    }


def codec_line(codec: dict[str, Any]) -> str | None:
    """One summary line for a coded tier's codec section; None for a tier without a codec."""
    if codec["name"] == "none":
        return None
    rates = [f"{op} {rate / 1e9:.2f} GB/s per core" for op, rate in
             (("encode", codec["encode_bytes_per_s_per_core"]), ("decode", codec["decode_bytes_per_s_per_core"]))
             if rate]
    ratio = f"{codec['ratio']:.3f}" if codec["ratio"] else "-"
    return (f"codec {codec['name']}: ratio {ratio} ({codec['physical_bytes_written'] / 1e9:.3f} GB reached the "
            f"device for {codec['logical_bytes_written'] / 1e9:.3f} GB of KV written)"
            + (f", {', '.join(rates)}" if rates else ""))
