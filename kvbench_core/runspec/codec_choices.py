"""Choosing a codec in the spec (``cache.codec``, or ``codec`` on one tier): the choice's schema, its checks
and its resolved form.  Putting the stage around a tier is ``kvbench_core.codecs.stage``.

A choice is a codec name (``codec: zstd``) or ``{name, options, chunk, segment}``.
A tier's own ``codec`` wins over ``cache.codec``; ``none`` means no stage at
all, so a tier without a codec runs exactly the code it ran before codecs.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import lookup
from kvbench_core.contracts.units import parse_size, size_schema
from kvbench_core.contracts.validation import validate_or_raise

DEFAULT_CHUNK = 1 << 20
DEFAULT_SEGMENT = 64 << 20
MAX_CHUNK = 64 << 20  # the payload generator's largest piece

CODEC_SCHEMA: dict[str, Any] = {
    "description": "a codec name (none, zstd, lz4, bf16_planes or a plugin's), or {name, options, chunk, segment}",
    "oneOf": [
        {"type": "string"},
        {"type": "object", "additionalProperties": False, "required": ["name"],
         "properties": {
             "name": {"type": "string"},
             "options": {"type": "object"},
             "chunk": size_schema("logical bytes encoded independently (default 1MiB)"),
             "segment": size_schema("logical bytes per stored object, a multiple of chunk "
                                        "(default 64MiB): what one worker holds encoded in memory"),
         }},
    ],
}


def codec_choice(value: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The resolved form ``{name, options, chunk, segment}`` (sizes in bytes), or None for no stage."""
    if value is None:
        return None
    given = {"name": value} if isinstance(value, str) else value
    return {"name": given["name"], "options": dict(given.get("options") or {}),
            "chunk": parse_size(given.get("chunk", DEFAULT_CHUNK)),
            "segment": parse_size(given.get("segment", DEFAULT_SEGMENT))}


def tier_codec(cache: dict[str, Any], tier: dict[str, Any]) -> str | dict[str, Any] | None:
    """The codec a tier uses as written: its own, else the cache-wide one."""
    return tier["codec"] if "codec" in tier else cache.get("codec")


def check_codec_choices(raw: dict[str, Any]) -> None:
    """Spec-time checks JSON Schema cannot make: installed names, options, chunk/segment sizes, lossy + verify."""
    cache = raw["cache"]
    places = [("cache.codec", cache.get("codec"))]
    places += [(f"cache.tiers[{i}].codec", tier.get("codec")) for i, tier in enumerate(cache["tiers"])]
    for path, value in places:
        choice = codec_choice(value)
        if choice is None:
            continue
        cls = _check_choice(choice, value, path)
        if raw.get("verify") and not cls.lossless:
            raise SpecError(f"{path}: codec {choice['name']!r} is lossy, so verify: true would report every read "
                            "as corrupt; use a lossless codec or verify: false")


def _check_choice(choice: dict[str, Any], value: str | dict[str, Any], path: str) -> Any:
    """The codec class of a resolved ``choice`` (written as ``value`` at ``path``), its options and sizes checked."""
    cls = lookup("codec", choice["name"], path=f"{path}.name" if isinstance(value, dict) else path)
    validate_or_raise(choice["options"], cls.options_schema, root=f"{path}.options")
    if not 0 < choice["chunk"] <= MAX_CHUNK:
        raise SpecError(f"{path}.chunk: expected a size from 1 byte to 64MiB, got {choice['chunk']}")
    if choice["segment"] < choice["chunk"] or choice["segment"] % choice["chunk"]:
        raise SpecError(f"{path}.segment: must be a multiple of chunk ({choice['chunk']} bytes), "
                        f"got {choice['segment']}")
    return cls


def check_codec(value: dict[str, Any] | str | None, *, path: str) -> dict[str, Any] | None:
    """One tier's codec choice built outside a spec (``--tier``), in any form the spec allows: checked as a
    spec's is (a bad one is a ``SpecError`` naming ``<path>.codec``), and returned resolved (None for none)."""
    if value is None:
        return None
    where = f"{path}.codec"
    validate_or_raise(value, CODEC_SCHEMA, root=where)
    choice = codec_choice(value)
    if choice is None or choice["name"] == "none":
        return None
    _check_choice(choice, value, where)
    return choice


def resolve_codecs(spec: dict[str, Any]) -> None:
    """Give every tier of a resolved spec that runs through a codec its effective ``codec`` (resolved form);
    a spec without codecs resolves exactly as it did before codecs existed."""
    cache = spec["cache"]
    default = codec_choice(cache.pop("codec", None))
    if default is not None:
        cache["codec"] = default
    for tier in cache["tiers"]:
        choice = codec_choice(tier.pop("codec")) if "codec" in tier else default
        if choice is not None:
            tier["codec"] = choice
